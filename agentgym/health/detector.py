"""The faulty-worker detector: heartbeats in, named faults out.

:class:`Detector` keeps a sliding window of heartbeats per worker (a rank, or a Ray env
worker) and, on every :meth:`Detector.update`, judges them with the pure functions of
:mod:`~agentgym.health.scoring`:

* **hung**: no new heartbeat for ``hung_after_s`` (the process is stopped, dead, or holds
  the GIL in C code), or no CPU use outside any collective for ``stuck_after_s`` while
  a peer waits in a collective as long;
* **slow**: drifting from its peers on ``min_metrics`` metrics or more, without a break,
  for ``persist_s`` (the window the rates are taken over is ``window_s``);
* **broken**: a non-finite loss, or ``max_errors`` errors more than its peers in the
  window.

Each fault is reported once (until the worker recovers: a new heartbeat after a hang, a
drift that ends). Ages are measured on the observer's clock (when a new heartbeat was
first seen), so the writers' clocks need not agree with the observer's.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym.health.scoring import (
    MetricRule,
    Sample,
    broken,
    drifting,
    stale,
    stuck,
    window_rates,
)


@dataclass
class DetectorSettings:
    """The detector's knobs, and the one place their defaults are written: the trainer's
    ``health`` config section (``HealthConfig``) is these fields plus its own, keyed
    ``health.hung_after_s`` and so on.

    Attributes:
        hung_after_s: no new heartbeat for this long is a hang.
        stuck_after_s: no CPU use outside collectives for this long, while a peer waits
            in a collective as long, is a hang too.
        slow_factor: a metric this many times worse than the peers' median drifts.
        window_s: the sliding window the metrics' rates are taken over.
        persist_s: a drift on ``min_metrics`` metrics must last this long (without a
            break) to count.
        min_metrics: drifting on this many metrics at once makes a straggler (slow).
        max_errors: this many errors in the window, and as many more than the peers,
            make a Ray env worker broken (a non-finite loss makes a rank broken).
    """

    hung_after_s: float = 10.0
    stuck_after_s: float = 120.0
    slow_factor: float = 2.0
    window_s: float = 20.0
    persist_s: float = 10.0
    min_metrics: int = 2
    max_errors: int = 3


@dataclass
class Fault:
    """A worker the detector flagged.

    Attributes:
        kind: ``hung``, ``slow`` or ``broken``.
        worker: ``rank1``, ``worker0``, ...
        host / pid: where it runs.
        reason: one line: what gave it away.
        evidence: the metrics behind it (value, peers' median, ratio) or the ages.
        step / phase: where the worker was (ranks).
        time: wall-clock time of the detection.
    """

    kind: str
    worker: str
    host: str
    pid: int
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)
    step: int | None = None
    phase: str | None = None
    time: float = field(default_factory=time.time)

    def message(self) -> str:
        where = f" (step {self.step}, phase {self.phase})" if self.step is not None else ""
        return (
            f"{self.worker} on host {self.host} (pid {self.pid}) is {self.kind}{where}: "
            f"{self.reason}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "worker": self.worker,
            "host": self.host,
            "pid": self.pid,
            "reason": self.reason,
            "evidence": self.evidence,
            "step": self.step,
            "phase": self.phase,
            "time": self.time,
        }


@dataclass
class _Track:
    identity: tuple[Any, ...]
    seq: Any = None
    last_new: float = 0.0  # observer time of the last new heartbeat
    record: Mapping[str, Any] = field(default_factory=dict)
    samples: deque[tuple[float, Sample]] = field(default_factory=deque)
    drift_since: float | None = None
    reported: set[str] = field(default_factory=set)


class Detector:
    """Faulty workers among peers from their heartbeats (see the module docstring).

    Args:
        settings: the knobs.
        rules: the metrics that reveal a straggler
            (:data:`~agentgym.health.scoring.RANK_RULES` or ``WORKER_RULES``).
    """

    def __init__(self, settings: DetectorSettings, rules: Sequence[MetricRule]) -> None:
        self.settings = settings
        self.rules = tuple(rules)
        self._tracks: dict[str, _Track] = {}
        self._keep_s = max(settings.window_s, settings.stuck_after_s) + 5.0

    @property
    def workers(self) -> list[str]:
        return sorted(self._tracks)

    def forget(self, worker: str) -> None:
        """Stop tracking a worker (it was replaced or stopped)."""
        self._tracks.pop(worker, None)

    def ages(self, now: float) -> dict[str, float]:
        """Seconds since each worker's last new heartbeat (observer's clock); workers
        that said they are done (a normal exit) are left out."""
        return {w: now - t.last_new for w, t in self._tracks.items() if not t.record.get("done")}

    def update(self, now: float, records: Mapping[str, Mapping[str, Any]]) -> list[Fault]:
        """Take the latest heartbeat record of each worker; return the new faults.

        Args:
            now: the observer's monotonic clock.
            records: worker -> its latest record (as written; the same record again when
                nothing new came). Workers missing here keep their last one.
        """
        for worker, rec in records.items():
            self._observe(now, worker, rec)
        return self._judge(now)

    # ------------------------------------------------------------------ internals
    def _observe(self, now: float, worker: str, rec: Mapping[str, Any]) -> None:
        identity = (rec.get("pid"), rec.get("started"), rec.get("host"))
        track = self._tracks.get(worker)
        if track is None or track.identity != identity:  # new, or restarted in its place
            track = self._tracks[worker] = _Track(identity=identity, last_new=now)
        if rec.get("seq") == track.seq:
            return
        track.seq = rec.get("seq")
        track.last_new = now
        track.record = rec
        track.reported.discard("hung")
        track.samples.append((now, Sample.from_record(rec)))
        while track.samples and now - track.samples[0][0] > self._keep_s:
            track.samples.popleft()

    def _rates(self, now: float, span_s: float) -> dict[str, dict[str, float]]:
        out = {}
        for w, track in self._tracks.items():
            window = [s for seen, s in track.samples if now - seen <= span_s]
            if window:
                out[w] = window_rates(window)
        return out

    def _fault(self, worker: str, kind: str, reason: str, evidence: dict[str, Any]) -> Fault:
        track = self._tracks[worker]
        rec = track.record
        track.reported.add(kind)
        return Fault(
            kind=kind,
            worker=worker,
            host=str(rec.get("host", "?")),
            pid=int(rec.get("pid") or 0),
            reason=reason,
            evidence=evidence,
            step=rec.get("step"),
            phase=rec.get("phase"),
        )

    def _judge(self, now: float) -> list[Fault]:
        s = self.settings
        faults: list[Fault] = []
        ages = self.ages(now)
        fresh = {w: a for w, a in ages.items() if a < s.hung_after_s}
        for w, age in stale(ages, s.hung_after_s).items():
            if "hung" in self._tracks[w].reported:
                continue
            peers = (
                f"; its peers' last heartbeats are {max(fresh.values()):.1f} s old at most"
                if fresh
                else ""
            )
            faults.append(
                self._fault(
                    w,
                    "hung",
                    f"no heartbeat for {age:.1f} s{peers}",
                    {"heartbeat_age_s": age, "peer_ages_s": fresh},
                )
            )
        alive = {w for w in fresh}
        stuck_rates = {w: r for w, r in self._rates(now, s.stuck_after_s).items() if w in alive}
        for w, why in stuck(stuck_rates, s.stuck_after_s).items():
            if "hung" not in self._tracks[w].reported:
                faults.append(self._fault(w, "hung", why, {"stuck": stuck_rates[w]}))
        rates = {w: r for w, r in self._rates(now, s.window_s).items() if w in alive}
        for w, why in broken(rates, s.max_errors).items():
            if "broken" not in self._tracks[w].reported:
                faults.append(self._fault(w, "broken", why, {"rates": rates[w]}))
        drifts = drifting(rates, self.rules, s.slow_factor)
        for w, track in self._tracks.items():
            mine = drifts.get(w, [])  # (a done or hung worker is not in ``alive``)
            if len(mine) < s.min_metrics or w not in alive:
                track.drift_since = None
                track.reported.discard("slow")
                continue
            if track.drift_since is None:
                track.drift_since = now
            lasted = now - track.drift_since
            if lasted >= s.persist_s and "slow" not in track.reported:
                reason = f"for {lasted:.0f} s it drifted from its peers on {len(mine)} " + (
                    "metrics: " + "; ".join(d.describe() for d in mine)
                )
                faults.append(self._fault(w, "slow", reason, {d.metric: d.to_dict() for d in mine}))
        return faults
