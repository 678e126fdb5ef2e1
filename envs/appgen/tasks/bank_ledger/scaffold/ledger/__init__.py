"""ledger: an event-sourced bank ledger (see spec.md)."""
