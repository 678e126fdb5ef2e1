"""inventory: stock keeping with weighted average cost, reports and a CLI (see spec.md)."""
