"""adventure: a text adventure engine with worlds in JSON (see spec.md)."""
