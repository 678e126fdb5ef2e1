"""ratelimit: token bucket, fixed window and sliding log rate limiters (see spec.md)."""
