"""The detector's arithmetic, as pure functions: rates over a window, drift from peers.

After Minder (arXiv 2411.01791): machines doing the same job look alike, so a faulty one
shows as the one that drifts away from its peers, on several metrics, for a while. Here:

1. :func:`window_rates` turns a worker's heartbeats over a sliding window into rates
   (share of time waiting in collectives, CPU share, tokens per generating second, mean
   env-call time, ...) and current gauges (memory, the last step's compute time).
2. :func:`drift` compares one metric of every worker with the median of its *peers*
   (the other workers: a leave-one-out median, so that two workers can be told apart)
   in the direction that is bad for that metric: a worker is drifting when it is at
   least ``factor`` times worse than its peers and the gap is at least the metric's
   ``min_gap`` (so that noise on tiny values does not count).
3. :func:`drifting` does that for every rule; a worker drifting on ``min_metrics`` rules
   or more is a straggler candidate. Persistence over time is the detector's job
   (:class:`~agentgym.health.detector.Detector`).
4. :func:`stale`, :func:`stuck` and :func:`broken` judge hangs and errors.

Departure from Minder: no learned denoising model (its LSTM-VAE); the metrics are few and
directional, and a worker is compared with the median of the others rather than by its
distance to every other machine. With two ranks, a symmetric distance cannot say which of
the two drifted; "the others wait for it" can.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: the metric is bad when high (a slow step) / when low (few tokens per second)
HIGH_BAD = 1
LOW_BAD = -1

#: derived rate -> (counter whose change is the numerator, counter of the denominator or
#: None for the window's seconds, smallest denominator change that makes a rate)
RATES: dict[str, tuple[str, str | None, float]] = {
    "wait_share": ("collective_s", None, 0.0),
    "cpu_share": ("cpu_s", None, 0.0),
    "demand_share": ("demand_s", None, 0.0),
    "tokens_per_gen_s": ("tokens", "gen_s", 0.05),
    "call_s": ("busy_s", "calls", 1.0),
}
#: counters reported as their change over the window
DELTAS = ("errors", "nonfinite", "calls")
#: CPU share under which a process counts as doing nothing
IDLE_CPU_SHARE = 0.02


@dataclass(frozen=True)
class Sample:
    """One heartbeat, as the detector uses it.

    Attributes:
        worker: ``rank1``, ``worker3``, ...
        t: the writer's wall clock when it was written (rates use differences of one
            worker's own clock, so clocks of different hosts need not agree).
        counters: cumulative numbers (CPU seconds, collective seconds, tokens, ...).
        gauges: current numbers (memory, the wait in progress, last step's compute time).
    """

    worker: str
    t: float
    counters: Mapping[str, float] = field(default_factory=dict)
    gauges: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Sample:
        """A heartbeat record (the JSON a rank or a Ray worker reports) as a sample."""
        return cls(
            worker=str(rec["worker"]),
            t=float(rec["t"]),
            counters={k: float(v) for k, v in dict(rec.get("counters") or {}).items()},
            gauges={k: float(v) for k, v in dict(rec.get("gauges") or {}).items()},
        )


@dataclass(frozen=True)
class MetricRule:
    """How one metric is judged: which direction is bad and what gap is noise.

    Attributes:
        name: a key of :func:`window_rates`' result.
        worse: :data:`HIGH_BAD` or :data:`LOW_BAD`.
        min_gap: the smallest absolute difference from the peers that counts.
        meaning: what a drift means, for the message ("the others wait for it").
    """

    name: str
    worse: int
    min_gap: float
    meaning: str = ""


@dataclass(frozen=True)
class Drift:
    """One metric on which a worker is worse than its peers."""

    metric: str
    value: float
    peers: float
    ratio: float  # how many times worse (>= the factor)
    meaning: str = ""

    def describe(self) -> str:
        direction = "higher" if self.value > self.peers else "lower"
        ratio = "far" if self.ratio == float("inf") else f"{self.ratio:.1f}x"
        tail = f": {self.meaning}" if self.meaning else ""
        return (
            f"{self.metric} {_fmt(self.value)} vs peers {_fmt(self.peers)} "
            f"({ratio} {direction}{tail})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "peers": self.peers, "ratio": self.ratio}


#: what gives a straggling rank away (each rank plays the same share of the work)
RANK_RULES = (
    MetricRule("wait_share", LOW_BAD, 0.10, "the others wait for it in collectives"),
    MetricRule("demand_share", HIGH_BAD, 0.25, "it wants the CPU while the others wait"),
    MetricRule("tokens_per_gen_s", LOW_BAD, 0.0, "it generates slower"),
    MetricRule("step_compute_s", HIGH_BAD, 0.5, "its own work in a step takes longer"),
    MetricRule("rss_mb", HIGH_BAD, 1024.0, "it holds more memory"),
)
#: what gives a slow Ray env worker away (episodes are spread evenly over the workers)
WORKER_RULES = (
    MetricRule("call_s", HIGH_BAD, 0.05, "its env calls take longer"),
    MetricRule("oldest_call_s", HIGH_BAD, 2.0, "a call of its has been running longer"),
    MetricRule("rss_mb", HIGH_BAD, 1024.0, "it holds more memory"),
)


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def window_rates(samples: Sequence[Sample]) -> dict[str, float]:
    """Rates over the window from the first to the last sample, plus the last gauges.

    A rate needs its denominator to have moved (``RATES``); counters in ``DELTAS`` are
    given as their change. Returns only the gauges for fewer than two samples.
    """
    if not samples:
        return {}
    first, last = samples[0], samples[-1]
    out: dict[str, float] = dict(last.gauges)
    dt = last.t - first.t
    if len(samples) < 2 or dt <= 0:
        return out

    def change(key: str) -> float:
        return last.counters.get(key, 0.0) - first.counters.get(key, 0.0)

    for name, (num, den, min_den) in RATES.items():
        if num not in last.counters:
            continue
        d = dt if den is None else change(den)
        if den is not None and (den not in last.counters or d <= min_den):
            continue
        out[name] = change(num) / d
    for key in DELTAS:
        if key in last.counters:
            out[key] = change(key)
    out["window_s"] = dt
    return out


def peer_median(values: Mapping[str, float], worker: str) -> float | None:
    """The median of every other worker's value (``None`` without peers)."""
    others = [v for w, v in values.items() if w != worker]
    return statistics.median(others) if others else None


def drift(values: Mapping[str, float], rule: MetricRule, factor: float) -> dict[str, Drift]:
    """The workers at least ``factor`` times worse than their peers on one metric.

    Args:
        values: each worker's value of ``rule.name`` (workers without one left out).
        rule: direction and noise floor of the metric.
        factor: how many times worse counts as drifting (> 1).
    """
    out = {}
    for worker, x in values.items():
        peers = peer_median(values, worker)
        if peers is None:
            continue
        bad, good = (x, peers) if rule.worse == HIGH_BAD else (peers, x)
        gap = bad - good
        if gap < rule.min_gap or gap <= 0:
            continue
        ratio = bad / good if good > 0 else float("inf")
        if ratio >= factor:
            out[worker] = Drift(rule.name, x, peers, ratio, rule.meaning)
    return out


def drifting(
    rates: Mapping[str, Mapping[str, float]], rules: Sequence[MetricRule], factor: float
) -> dict[str, list[Drift]]:
    """Every worker's drifts over all ``rules`` (workers with none left out)."""
    out: dict[str, list[Drift]] = {}
    for rule in rules:
        values = {w: r[rule.name] for w, r in rates.items() if rule.name in r}
        for worker, d in drift(values, rule, factor).items():
            out.setdefault(worker, []).append(d)
    return out


def stale(ages: Mapping[str, float], hung_after_s: float) -> dict[str, float]:
    """Workers whose last new heartbeat is ``hung_after_s`` or more old: their age."""
    return {w: a for w, a in ages.items() if a >= hung_after_s}


def stuck(rates: Mapping[str, Mapping[str, float]], after_s: float) -> dict[str, str]:
    """Workers doing nothing while a peer waits for them in a collective.

    ``rates`` are taken over the last ``after_s`` seconds. A worker is stuck when its
    CPU share was under :data:`IDLE_CPU_SHARE`, it is not in a collective itself, and a
    peer has been waiting in one for ``after_s`` or more (a deadlock in Python, a read
    that never returns). Returns a reason per worker.
    """
    waiting = {w: r.get("collective_wait_s", 0.0) for w, r in rates.items()}
    out = {}
    for w, r in rates.items():
        if r.get("window_s", 0.0) < after_s * 0.9 or "cpu_share" not in r:
            continue
        if r["cpu_share"] >= IDLE_CPU_SHARE or waiting[w] > 0:
            continue
        peers = {p: s for p, s in waiting.items() if p != w and s >= after_s}
        if peers:
            p, s = max(peers.items(), key=lambda kv: kv[1])
            out[w] = (
                f"no CPU use ({r['cpu_share']:.1%}) outside any collective for "
                f"{r['window_s']:.0f} s while {p} waits in a collective for {s:.0f} s"
            )
    return out


def broken(rates: Mapping[str, Mapping[str, float]], max_errors: int) -> dict[str, str]:
    """Workers that report non-finite losses, or ``max_errors`` or more errors in the
    window and at least ``max_errors`` more than the median of their peers (errors
    everywhere point at the envs, not at one worker). Returns a reason per worker."""
    out = {}
    errors = {w: r["errors"] for w, r in rates.items() if "errors" in r}
    for w, r in rates.items():
        if r.get("nonfinite", 0) > 0:
            out[w] = f"{int(r['nonfinite'])} non-finite loss(es) in the last steps"
            continue
        n = errors.get(w, 0.0)
        peers = peer_median(errors, w) or 0.0
        if n >= max_errors and n - peers >= max_errors:
            out[w] = f"{int(n)} errors in {r.get('window_s', 0):.0f} s (peers: {peers:g})"
    return out
