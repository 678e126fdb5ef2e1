"""Progress reporting for long work: one reporter used by rollouts, benchmarks, SFT, training.

On a terminal it is a tqdm bar with the latest figures beside it. Anywhere else (CI logs,
a file, a pipe) a bar would print thousands of carriage returns, so it writes plain lines
instead, and only a few: one when the work starts from a resumed point, then one each
time another tenth of the total is done, or when ``every_s`` seconds have passed since
the last line (so slow steps are never silent), and always one for the last update::

    [sft] 150/1500 steps  loss=1.23  (12 s)
    [sft] 300/1500 steps  loss=0.871  (24 s)

``Progress(enabled=False)`` does nothing at all (ranks other than 0 of a sharded run,
``run.progress: false``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO


class Progress:
    """A progress bar on a terminal, a few plain lines in logs.

    Args:
        total: the number of updates that makes the work done.
        desc: a short name shown in front (``"sft"``, ``"dapo"``, a suite name).
        unit: what one update is (``"step"``, ``"episode"``).
        start: updates already done (a resumed run).
        enabled: ``False`` turns every call into a no-op.
        every_s: in plain-line mode, the longest silence between two lines.
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
        every_s: float = 30.0,
        stream: TextIO | None = None,
    ) -> None:
        self.total = max(0, int(total))
        self.done = int(start)
        self.desc, self.unit = desc, unit
        self.enabled = enabled and self.total > 0
        self.every_s = every_s
        self.stream = stream or sys.stderr
        self.stats: dict[str, Any] = {}
        self._t0 = self._last_line = time.monotonic()
        self._next_tenth = self._tenth_after(self.done)
        self._bar = None
        if not self.enabled:
            return
        if _is_terminal(self.stream):
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total, initial=self.done, desc=desc, unit=unit, file=self.stream
            )
        elif self.done:
            self._line(f"{self.done}/{self.total} {unit}s already done")

    def update(self, n: int = 1, stats: Mapping[str, Any] | None = None) -> None:
        """``n`` more units done; ``stats`` (name -> number or text) are shown beside."""
        self.done += n
        if stats:
            self.stats = dict(stats)
        if not self.enabled:
            return
        if self._bar is not None:
            if self.stats:
                self._bar.set_postfix({k: _fmt(v) for k, v in self.stats.items()}, refresh=False)
            self._bar.update(n)
            return
        now = time.monotonic()
        last = self.done >= self.total
        if last or self.done >= self._next_tenth or now - self._last_line >= self.every_s:
            self._next_tenth = self._tenth_after(self.done)
            shown = "  ".join(f"{k}={_fmt(v)}" for k, v in self.stats.items())
            self._line(
                f"{self.done}/{self.total} {self.unit}s"
                + (f"  {shown}" if shown else "")
                + f"  ({now - self._t0:.0f} s)"
            )

    def write(self, text: str) -> None:
        """A message that does not tear the bar (printed above it on a terminal)."""
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        """End the bar (a no-op in plain-line mode); safe to call twice."""
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


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)
