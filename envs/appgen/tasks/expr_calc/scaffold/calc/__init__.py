"""calc: an expression calculator with variables, functions and a REPL (see spec.md)."""
