"""Errors raised by ratelimit."""


class RateLimitExceeded(Exception):
    """A call was refused; ``retry_after`` says how many seconds to wait."""

    def __init__(self, retry_after):
        super().__init__(f"rate limit exceeded; retry after {retry_after:.3f}s")
        self.retry_after = retry_after
