"""Fixed window and sliding log limiters."""

import math
from collections import deque

from ratelimit.clock import SystemClock


def _validate(limit, window):
    if limit < 1:
        raise ValueError("limit must be >= 1")
    if window <= 0:
        raise ValueError("window must be > 0")


class FixedWindow:
    def __init__(self, limit, window, clock=None):
        _validate(limit, window)
        self.limit = limit
        self.window = window
        self.clock = clock or SystemClock()
        self._index = None
        self._count = 0

    def _roll(self):
        index = math.floor(self.clock.now() / self.window)
        if index != self._index:
            self._index = index
            self._count = 0
        return index

    def remaining(self):
        self._roll()
        return self.limit - self._count

    def allow(self):
        self._roll()
        if self._count < self.limit:
            self._count += 1
            return True
        return False

    def retry_after(self):
        index = self._roll()
        if self._count < self.limit:
            return 0.0
        return (index + 1) * self.window - self.clock.now()


class SlidingLog:
    def __init__(self, limit, window, clock=None):
        _validate(limit, window)
        self.limit = limit
        self.window = window
        self.clock = clock or SystemClock()
        self._log = deque()

    def _expire(self):
        now = self.clock.now()
        while self._log and self._log[0] <= now - self.window:
            self._log.popleft()
        return now

    def remaining(self):
        self._expire()
        return self.limit - len(self._log)

    def allow(self):
        now = self._expire()
        if len(self._log) < self.limit:
            self._log.append(now)
            return True
        return False

    def retry_after(self):
        now = self._expire()
        if len(self._log) < self.limit:
            return 0.0
        return self._log[0] + self.window - now
