"""ratelimit: token bucket, fixed window and sliding log rate limiters."""

from ratelimit.clock import ManualClock, SystemClock
from ratelimit.errors import RateLimitExceeded
from ratelimit.registry import KeyedLimiter, rate_limited
from ratelimit.token_bucket import TokenBucket
from ratelimit.window import FixedWindow, SlidingLog

__all__ = [
    "FixedWindow",
    "KeyedLimiter",
    "ManualClock",
    "RateLimitExceeded",
    "SlidingLog",
    "SystemClock",
    "TokenBucket",
    "rate_limited",
]
