"""todo: a to-do list stored in SQLite, with a command line interface (see spec.md)."""
