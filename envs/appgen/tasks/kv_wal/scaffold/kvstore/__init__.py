"""kvstore: a durable key-value store with a write-ahead log (see spec.md)."""
