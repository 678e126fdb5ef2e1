"""jobq: a persistent job queue with leases and retries (see spec.md)."""
