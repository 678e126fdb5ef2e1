"""Progress reporting for long work: one reporter used by rollouts, benchmarks, SFT, training.

On a terminal it is a tqdm bar with the latest figures beside it. Anywhere else (CI logs,
a file, a pipe) a bar would print thousands of carriage returns, so it writes plain lines
instead, and only a few: one when the work starts from a resumed point, then one each
time another tenth of the total is done, and always one for the last update::

    [sft] 150/1500 steps  loss=1.23  (12 s)
    [sft] 300/1500 steps  loss=0.871  (24 s)

No phase is silent for long: while a bar is open a background thread writes the same
line again once ``every_s`` seconds have passed without one (on a terminal it refreshes
the bar's clock), even when no update comes because the work sits inside one long call
(a batched generation). :meth:`Progress.note` sets figures known between updates (the
rollout's turns so far), shown in that line. Only the innermost open bar speaks: an
evaluation inside a training step is not doubled by the training bar.

``Progress(enabled=False)`` does nothing at all (ranks other than 0 of a sharded run,
``run.progress: false``).
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any, TextIO

#: the longest silence of an open bar, in seconds (``every_s``' default)
DEFAULT_EVERY_S = 30.0
#: the open bars, innermost last (only that one's heartbeat speaks); weak, so that a bar
#: its owner dropped without closing it goes quiet
_OPEN: list[weakref.ref[Progress]] = []
_OPEN_LOCK = threading.Lock()


class Progress:
    """A progress bar on a terminal, a few plain lines in logs.

    Args:
        total: the number of updates that makes the work done.
        desc: a short name shown in front (``"sft"``, ``"dapo"``, a suite name).
        unit: what one update is (``"step"``, ``"episode"``).
        start: updates already done (a resumed run).
        enabled: ``False`` turns every call into a no-op.
        every_s: the longest silence between two lines (default :data:`DEFAULT_EVERY_S`).
        stream: where to write (default ``sys.stderr``); a bar is used only when it is
            a terminal.
    """

    def __init__(
        self,
        total: int,
        *,
        desc: str,
        unit: str = "step",
        start: int = 0,
        enabled: bool = True,
        every_s: float | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self.total = max(0, int(total))
        self.done = int(start)
        self.desc, self.unit = desc, unit
        self.enabled = enabled and self.total > 0
        self.every_s = DEFAULT_EVERY_S if every_s is None else every_s
        self.stream = stream or sys.stderr
        self.stats: dict[str, Any] = {}
        self._t0 = self._last_line = time.monotonic()
        self._next_tenth = self._tenth_after(self.done)
        self._bar = None
        self._lock = threading.RLock()
        self._closed = threading.Event()
        if not self.enabled:
            return
        if _is_terminal(self.stream):
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total, initial=self.done, desc=desc, unit=unit, file=self.stream
            )
        elif self.done:
            self._line(f"{self.done}/{self.total} {unit}s already done")
        with _OPEN_LOCK:
            _OPEN.append(weakref.ref(self))
        closed, ref = self._closed, weakref.ref(self)
        threading.Thread(
            target=_heartbeat, args=(ref, closed), name=f"progress-{desc}", daemon=True
        ).start()

    def update(self, n: int = 1, stats: Mapping[str, Any] | None = None) -> None:
        """``n`` more units done; ``stats`` (name -> number or text) are shown beside."""
        with self._lock:
            self.done += n
            if stats:
                self.stats = dict(stats)
            if not self.enabled:
                return
            if self._bar is not None:
                if self.stats:
                    postfix = {k: _fmt(v) for k, v in self.stats.items()}
                    self._bar.set_postfix(postfix, refresh=False)
                self._bar.update(n)
                return
            now = time.monotonic()
            last = self.done >= self.total
            if last or self.done >= self._next_tenth or now - self._last_line >= self.every_s:
                self._next_tenth = self._tenth_after(self.done)
                self._status(now)

    def note(self, stats: Mapping[str, Any]) -> None:
        """Figures known between updates (merged into :attr:`stats`), shown in the next
        line; counts nothing."""
        with self._lock:
            self.stats = {**self.stats, **stats}

    def _status(self, now: float) -> None:
        shown = "  ".join(f"{k}={_fmt(v)}" for k, v in self.stats.items())
        self._line(
            f"{self.done}/{self.total} {self.unit}s"
            + (f"  {shown}" if shown else "")
            + f"  ({now - self._t0:.0f} s)"
        )

    def _beat(self) -> float:
        """One look of the heartbeat: a line (or a refreshed bar) if ``every_s`` passed
        without one; returns the seconds until the next look."""
        with self._lock:
            now = time.monotonic()
            due = self._last_line + self.every_s
            if self._closed.is_set() or now < due:
                return max(0.05, min(due - now, self.every_s))
            if not self._innermost():
                self._last_line = now  # the inner bar speaks for both
            elif self._bar is not None:
                if self.stats:
                    self._bar.set_postfix(
                        {k: _fmt(v) for k, v in self.stats.items()}, refresh=False
                    )
                self._bar.refresh()
                self._last_line = now
            else:
                self._status(now)
            return self.every_s

    def _innermost(self) -> bool:
        with _OPEN_LOCK:
            _OPEN[:] = [r for r in _OPEN if r() is not None]
            return bool(_OPEN) and _OPEN[-1]() is self

    def write(self, text: str) -> None:
        """A message that does not tear the bar (printed above it on a terminal)."""
        with self._lock:
            if self._bar is not None:
                self._bar.write(text, file=self.stream)
            else:
                print(text, file=self.stream, flush=True)

    def close(self) -> None:
        """End the bar and its heartbeat; safe to call twice."""
        self._closed.set()
        with _OPEN_LOCK:
            _OPEN[:] = [r for r in _OPEN if r() is not None and r() is not self]
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _tenth_after(self, done: int) -> int:
        """The smallest multiple of total/10 (rounded up) beyond ``done``."""
        step = max(1, -(-self.total // 10))
        return (done // step + 1) * step

    def _line(self, text: str) -> None:
        self._last_line = time.monotonic()
        print(f"[{self.desc}] {text}", file=self.stream, flush=True)


def _heartbeat(ref: weakref.ref[Progress], closed: threading.Event) -> None:
    """The heartbeat thread of a bar: it ends when the bar is closed or dropped."""
    wait = 0.05
    while not closed.wait(wait):
        bar = ref()
        if bar is None:
            return
        wait = bar._beat()
        del bar


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)
