import pytest
from ratelimit.clock import ManualClock


def test_bucket_partial_refill_and_cap():
    from ratelimit.token_bucket import TokenBucket

    clock = ManualClock()
    b = TokenBucket(capacity=4, refill_rate=2, clock=clock)
    assert b.allow(4)
    assert b.available() == pytest.approx(0)
    clock.advance(0.75)
    assert b.available() == pytest.approx(1.5)
    assert not b.allow(2)
    assert b.available() == pytest.approx(1.5)
    clock.advance(100)
    assert b.available() == pytest.approx(4)


def test_bucket_retry_after():
    from ratelimit.token_bucket import TokenBucket

    clock = ManualClock()
    b = TokenBucket(capacity=3, refill_rate=0.5, clock=clock)
    assert b.retry_after(3) == 0.0
    assert b.allow(3)
    assert b.retry_after(1) == pytest.approx(2.0)
    clock.advance(1)
    assert b.retry_after(2) == pytest.approx(3.0)


def test_bucket_validation():
    from ratelimit.token_bucket import TokenBucket

    with pytest.raises(ValueError):
        TokenBucket(0, 1, clock=ManualClock())
    with pytest.raises(ValueError):
        TokenBucket(1, 0, clock=ManualClock())
    b = TokenBucket(2, 1, clock=ManualClock())
    with pytest.raises(ValueError):
        b.allow(3)
    with pytest.raises(ValueError):
        b.allow(0)


def test_fixed_window_aligned():
    from ratelimit.window import FixedWindow

    clock = ManualClock(start=9.5)
    w = FixedWindow(limit=2, window=10, clock=clock)
    assert w.remaining() == 2
    assert w.allow() and w.allow() and not w.allow()
    assert w.retry_after() == pytest.approx(0.5)
    clock.advance(0.5)
    assert w.remaining() == 2
    assert w.allow()
    assert w.retry_after() == 0.0


def test_sliding_log():
    from ratelimit.window import SlidingLog

    clock = ManualClock()
    s = SlidingLog(limit=2, window=10, clock=clock)
    assert s.allow()
    clock.advance(4)
    assert s.allow()
    assert not s.allow()
    assert s.retry_after() == pytest.approx(6)
    clock.advance(6)
    assert s.remaining() == 1
    assert s.allow()
    assert not s.allow()
    assert s.retry_after() == pytest.approx(4)


def test_window_validation():
    from ratelimit.window import FixedWindow, SlidingLog

    for cls in (FixedWindow, SlidingLog):
        with pytest.raises(ValueError):
            cls(0, 1, clock=ManualClock())
        with pytest.raises(ValueError):
            cls(1, 0, clock=ManualClock())


def test_keyed_limiter():
    from ratelimit.registry import KeyedLimiter
    from ratelimit.window import FixedWindow

    clock = ManualClock()
    reg = KeyedLimiter(lambda: FixedWindow(1, 60, clock=clock))
    assert len(reg) == 0
    assert reg.allow("alice")
    assert not reg.allow("alice")
    assert reg.allow("bob")
    assert len(reg) == 2
    reg.reset("alice")
    reg.reset("nobody")
    assert len(reg) == 1
    assert reg.allow("alice")


def test_decorator():
    from ratelimit.errors import RateLimitExceeded
    from ratelimit.registry import rate_limited
    from ratelimit.token_bucket import TokenBucket

    clock = ManualClock()
    calls = []

    @rate_limited(TokenBucket(1, 0.25, clock=clock))
    def work(x):
        calls.append(x)
        return x * 2

    assert work.__name__ == "work"
    assert work(3) == 6
    with pytest.raises(RateLimitExceeded) as info:
        work(4)
    assert info.value.retry_after == pytest.approx(4.0)
    assert calls == [3]
    clock.advance(4)
    assert work(5) == 10


def test_package_exports():
    import ratelimit

    for name in (
        "TokenBucket",
        "FixedWindow",
        "SlidingLog",
        "KeyedLimiter",
        "rate_limited",
        "RateLimitExceeded",
        "ManualClock",
        "SystemClock",
    ):
        assert hasattr(ratelimit, name), name
        assert getattr(ratelimit, name).__name__ == name


def test_system_clock_default():
    from ratelimit.token_bucket import TokenBucket

    b = TokenBucket(5, 1)
    assert b.allow()
    assert 3.9 <= b.available() <= 5
