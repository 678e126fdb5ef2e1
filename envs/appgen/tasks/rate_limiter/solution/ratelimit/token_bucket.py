"""Token bucket limiter."""

from ratelimit.clock import SystemClock


class TokenBucket:
    def __init__(self, capacity, refill_rate, clock=None):
        if capacity <= 0:
            raise ValueError("capacity must be > 0")
        if refill_rate <= 0:
            raise ValueError("refill_rate must be > 0")
        self.capacity = capacity
        self.refill_rate = refill_rate
        self.clock = clock or SystemClock()
        self._tokens = float(capacity)
        self._last = self.clock.now()

    def _refill(self):
        now = self.clock.now()
        elapsed = max(0.0, now - self._last)
        self._tokens = min(self.capacity, self._tokens + elapsed * self.refill_rate)
        self._last = now

    def _check(self, tokens):
        if tokens <= 0 or tokens > self.capacity:
            raise ValueError(f"tokens must be in (0, {self.capacity}], got {tokens}")

    def available(self):
        self._refill()
        return self._tokens

    def allow(self, tokens=1):
        self._check(tokens)
        self._refill()
        if self._tokens + 1e-9 >= tokens:
            self._tokens = max(0.0, self._tokens - tokens)
            return True
        return False

    def retry_after(self, tokens=1):
        self._check(tokens)
        self._refill()
        missing = tokens - self._tokens
        return 0.0 if missing <= 1e-9 else missing / self.refill_rate
