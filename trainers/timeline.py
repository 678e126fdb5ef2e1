"""A timeline of what the trainer did when, and the idle time ("bubbles") it implies.

The loop wraps each phase of a step in :meth:`Timeline.phase` (``rollout``, ``reward``,
``train``, ``sync``; ``eval`` and ``checkpoint`` are recorded but are not part of a
step). The engine reports its own busy intervals (``generate``). A *bubble* is time
inside the ``rollout`` and ``reward`` phases when the engine was not generating: the
model sat idle waiting for environments (resets, steps, graders) or for rewards.

``idle share = bubble seconds / step seconds``.

The bubble does not see the other waste of an all-sync rollout: the engine is busy, but
with a batch that shrinks as replies end, so the longest reply holds the step while most
rows sit finished. Its companions come from the engine's decode statistics over the
step (:attr:`Timeline.decode`, a :class:`~agentgym.generation.DecodeStats`):

* ``decode utilization = tokens decoded / (decode steps x rows each call started with)``;
* ``tail share = seconds decoding with fewer than half of a call's rows still
  generating / rollout seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

STEP_PHASES = ("rollout", "reward", "train", "sync")
WAITING_PHASES = ("rollout", "reward")


@dataclass
class Span:
    name: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def union_length(intervals: Sequence[tuple[float, float]], lo: float, hi: float) -> float:
    """Total length of the union of ``intervals`` clipped to ``[lo, hi]``."""
    clipped = sorted((max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi)
    total, cur_a, cur_b = 0.0, None, None
    for a, b in clipped:
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return total


@dataclass
class Timeline:
    """Phases of one step plus the engine's busy intervals."""

    spans: list[Span] = field(default_factory=list)
    generate: list[tuple[float, float]] = field(default_factory=list)
    #: the engine's decode statistics over the step (``DecodeStats.since``), or None
    decode: Any = None

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.spans.append(Span(name, t0, time.monotonic()))

    @contextmanager
    def watch(self, engine: Any) -> Iterator[None]:
        """Inside the block, record when ``engine`` generated (its ``busy`` intervals) and
        how full its decode batches were (its ``decode_stats``: :attr:`decode`)."""
        busy, stats = len(engine.busy), engine.decode_stats.copy()
        try:
            yield
        finally:
            self.generate.extend(engine.busy[busy:])
            self.decode = engine.decode_stats.since(stats)

    def seconds(self, name: str) -> float:
        return sum(s.seconds for s in self.spans if s.name == name)

    def step_seconds(self) -> float:
        return sum(s.seconds for s in self.spans if s.name in STEP_PHASES)

    def generate_seconds(self) -> float:
        return sum(
            union_length(self.generate, s.start, s.end) for s in self.spans if s.name == "rollout"
        )

    def bubble_seconds(self) -> float:
        total = 0.0
        for s in self.spans:
            if s.name in WAITING_PHASES:
                total += s.seconds - union_length(self.generate, s.start, s.end)
        return total

    def metrics(self) -> dict[str, float]:
        step = self.step_seconds()
        out = {
            f"time/{name}_s": self.seconds(name) for name in (*STEP_PHASES, "eval", "checkpoint")
        }
        out["time/generate_s"] = self.generate_seconds()
        out["time/step_s"] = step
        out["time/bubble_s"] = self.bubble_seconds()
        out["charts/idle_share"] = self.bubble_seconds() / step if step > 0 else 0.0
        if self.decode is not None:
            rollout = self.seconds("rollout")
            out["charts/decode_utilization"] = float(self.decode.utilization)
            out["time/tail_s"] = float(self.decode.tail_s)
            out["charts/tail_share"] = self.decode.tail_s / rollout if rollout > 0 else 0.0
        return out

    def to_records(self, step: int, origin: float) -> list[dict[str, float | str | int]]:
        """Rows for ``timeline.jsonl`` (times relative to ``origin``)."""
        rows: list[dict[str, float | str | int]] = [
            {"step": step, "phase": s.name, "start": s.start - origin, "end": s.end - origin}
            for s in self.spans
        ]
        for a, b in self.generate:
            rows.append({"step": step, "phase": "generate", "start": a - origin, "end": b - origin})
        return rows
