"""When a run stops before ``run.max_steps``: a polite signal (SIGTERM, Ctrl-C) that lets
the step in progress finish and saves a checkpoint (:class:`PoliteSignals`), and the
decision all ranks take together, so that they stop after the same step
(:func:`agreed_stop`)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from agentgym.trainers.distributed import DistInfo, all_gather_objects

#: what :func:`agreed_stop` returns: go on, stop, stop after saving a checkpoint
GO_ON, STOP, STOP_AFTER_CHECKPOINT = 0, 1, 2


class PoliteSignals:
    """While the context lasts, the first SIGTERM or SIGINT is recorded (:attr:`signum`)
    instead of ending the process, and the next one has its usual effect at once (the
    handlers that were there before are put back). Only the main thread can install
    handlers: elsewhere signals keep their usual effect.

    Args:
        say: prints what will happen (called from the handler).
        step: the step in progress, for that message.
    """

    def __init__(self, say: Callable[[str], None], step: Callable[[], int]) -> None:
        self.say, self.step = say, step
        self.signum = 0
        self._previous: dict[int, Any] = {}

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process a signal ended: 128 + its number."""
        return 128 + self.signum

    def _politely(self, signum: int, frame: Any) -> None:
        self.signum = signum
        self._restore()  # the next one: its usual effect
        self.say(
            f"[agentgym train] {signal.Signals(signum).name}: finishing step {self.step() + 1}, "
            "then saving a checkpoint and stopping (again to stop now)."
        )

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def __enter__(self) -> PoliteSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._politely)
        return self

    def __exit__(
        self, kind: type | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._restore()


def agreed_stop(local: int, dist: DistInfo, *, collective: bool) -> int:
    """What all ranks do after this step, from each rank's ``local`` wish
    (:data:`GO_ON`, :data:`STOP`, :data:`STOP_AFTER_CHECKPOINT`): the mildest stop any rank
    asked for, or go on. ``collective``: exchange the wishes (every rank must call it);
    otherwise this rank's own."""
    if not collective:
        return local
    wanted = all_gather_objects(local, dist)
    return GO_ON if not any(wanted) else min(w for w in wanted if w)
