"""Per-key limiters and a decorator."""

import functools

from ratelimit.errors import RateLimitExceeded


class KeyedLimiter:
    """One limiter per key, built by ``factory()`` on first use."""

    def __init__(self, factory):
        self.factory = factory
        self._limiters = {}

    def allow(self, key):
        limiter = self._limiters.get(key)
        if limiter is None:
            limiter = self._limiters[key] = self.factory()
        return limiter.allow()

    def reset(self, key):
        self._limiters.pop(key, None)

    def __len__(self):
        return len(self._limiters)


def rate_limited(limiter):
    """Refuse calls with RateLimitExceeded when ``limiter`` says no."""

    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if not limiter.allow():
                raise RateLimitExceeded(limiter.retry_after())
            return func(*args, **kwargs)

        return wrapper

    return decorate
