from ratelimit.clock import ManualClock
from ratelimit.token_bucket import TokenBucket


def test_bucket_starts_full_and_refills():
    clock = ManualClock()
    bucket = TokenBucket(capacity=2, refill_rate=1, clock=clock)
    assert bucket.allow() and bucket.allow()
    assert not bucket.allow()
    clock.advance(1)
    assert bucket.allow()
