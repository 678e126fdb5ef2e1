"""Runs that survive faults: heartbeats, a faulty-worker detector, the launcher, the lock.

See docs/reliability.md. Part of the core layer: the standard library and the core's public
names only, so that the trainer, the sandbox and the Ray workers' reaper can all use it.
What each module owns:

* :mod:`.scoring` -- the detector's arithmetic as pure functions (rates over a window,
  drift from the peers' median, hung / stuck / broken rules);
* :mod:`.detector` -- :class:`Detector`: heartbeats in, named :class:`Fault`\\ s out;
* :mod:`.heartbeat` -- the rank side: :class:`RankHeartbeat` (a file per rank, per
  second), time in collectives (:data:`COLLECTIVES`), dying with the launcher;
* :mod:`.supervisor` -- the launcher of ``agentgym train --nproc N``: torchrun, the
  detector, stop / restart (:func:`supervise`);
* :mod:`.workers` -- :class:`WorkerMonitor`: the Ray env workers, watched from the
  trainer;
* :mod:`.dumps` -- the suspect's Python stacks or ``/proc`` state, into the run folder;
* :mod:`.lock` -- :class:`RunLock`: one run per run folder;
* :mod:`.procs` -- ``/proc`` reads (:func:`alive`: the project's one "is this pid
  alive"), process trees, ``PR_SET_PDEATHSIG``.
"""

from __future__ import annotations

from agentgym.health.detector import Detector, DetectorSettings, Fault
from agentgym.health.heartbeat import (
    COLLECTIVES,
    EXIT_ORPHAN,
    EXIT_STOPPED,
    HEALTH_DIR,
    STACKS_SIGNAL,
    STOP_FILE,
    CollectiveClock,
    IntervalTotal,
    RankHeartbeat,
    RunStopped,
    guard_parent,
)
from agentgym.health.lock import (
    LAUNCHER_ENV,
    LOCK_FILE,
    RunLock,
    RunLockedError,
    held_by_launcher,
    read_owner,
)
from agentgym.health.procs import alive, die_with_parent
from agentgym.health.scoring import (
    HIGH_BAD,
    LOW_BAD,
    RANK_RULES,
    WORKER_RULES,
    Drift,
    MetricRule,
    Sample,
    broken,
    drift,
    drifting,
    peer_median,
    stale,
    stuck,
    window_rates,
)
from agentgym.health.supervisor import (
    FAULTS_FILE,
    LaunchPlan,
    latest_step,
    supervise,
)
from agentgym.health.workers import WorkerMonitor

__all__ = [
    "COLLECTIVES",
    "EXIT_ORPHAN",
    "EXIT_STOPPED",
    "FAULTS_FILE",
    "HEALTH_DIR",
    "HIGH_BAD",
    "LAUNCHER_ENV",
    "LOCK_FILE",
    "LOW_BAD",
    "RANK_RULES",
    "STACKS_SIGNAL",
    "STOP_FILE",
    "WORKER_RULES",
    "CollectiveClock",
    "Detector",
    "DetectorSettings",
    "Drift",
    "Fault",
    "IntervalTotal",
    "LaunchPlan",
    "MetricRule",
    "RankHeartbeat",
    "RunLock",
    "RunLockedError",
    "RunStopped",
    "Sample",
    "WorkerMonitor",
    "alive",
    "broken",
    "die_with_parent",
    "drift",
    "drifting",
    "guard_parent",
    "held_by_launcher",
    "latest_step",
    "peer_median",
    "read_owner",
    "stale",
    "stuck",
    "supervise",
    "window_rates",
]
