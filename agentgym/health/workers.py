"""Watching the Ray env workers from the trainer: the driver polls, the detector judges.

:class:`WorkerMonitor` is a thread of the trainer process (the Ray driver). Every
``heartbeat_s`` it asks each actor for its health record
(:meth:`agentgym.RayEnvWorkers.health`, answered on a thread of the actor's own, so a
busy actor still answers and a stopped or GIL-locked one does not), feeds the records to
a :class:`~agentgym.health.detector.Detector` with the worker rules (env-call
time, the oldest call in flight, memory; errors against the peers'), and on a fault:

* reports it (stderr, a row in ``faults.jsonl``, a dump in ``faults/`` with the actor's
  Python stacks or ``/proc`` state when it runs on this host);
* ``replace``: kills the actor and starts a new one in its slot; the episodes it held
  fail with reason ``worker_lost`` and are played again with the same seeds
  (``rollout.episode_retries``), so the step's results do not change;
* ``stop``: replaces it too (so that the rollout can finish), and the trainer stops after
  the step (:meth:`WorkerMonitor.check`);
* ``warn``: only reports.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgym import InfraError
from agentgym.health.detector import Detector, DetectorSettings, Fault
from agentgym.health.dumps import capture_many, write_dump
from agentgym.health.scoring import WORKER_RULES

if TYPE_CHECKING:  # agentgym.workers' reaper imports this package: no cycle at run time
    from agentgym import RayEnvWorkers

WORKER_ACTIONS = ("warn", "replace", "stop")


class WorkerMonitor:
    """A thread that watches ``workers`` (see the module docstring).

    Args:
        workers: the trainer's Ray env workers.
        settings: the detector's knobs.
        action: ``warn``, ``replace`` or ``stop``.
        run_dir: where ``faults.jsonl`` and ``faults/`` go.
        interval_s: seconds between looks.
        rank: the trainer rank that owns these workers (for the records).
    """

    def __init__(
        self,
        workers: RayEnvWorkers,
        settings: DetectorSettings,
        *,
        action: str,
        run_dir: Path,
        interval_s: float = 1.0,
        rank: int = 0,
    ) -> None:
        if action not in WORKER_ACTIONS:
            raise ValueError(f"action must be one of {WORKER_ACTIONS}, got {action!r}")
        self.workers = workers
        self.detector = Detector(settings, WORKER_RULES)
        self.action = action
        self.run_dir = Path(run_dir)
        self.interval_s = interval_s
        self.rank = rank
        self.faults: list[Fault] = []
        self.replaced = 0
        self._stop_reason: str | None = None
        self._closed = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="agentgym-worker-monitor", daemon=True
        )
        self._thread.start()

    def check(self) -> None:
        """Raise :class:`~agentgym.InfraError` (reason ``worker_fault``) when a fault
        with the ``stop`` action was found; the trainer calls it after each step."""
        if self._stop_reason is not None:
            raise InfraError(
                f"a Ray env worker was faulty and health.workers=stop: {self._stop_reason}. "
                "The run stops here; the last checkpoint stays and --resume continues. "
                "Set health.workers=replace to replace such workers and go on.",
                reason="worker_fault",
            )

    def close(self) -> None:
        """Stop watching (before the workers are closed)."""
        self._closed.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=self.interval_s + 5)

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        while not self._closed.is_set():
            t0 = time.monotonic()
            try:
                self.poll()
            except Exception as e:  # the workers were closed, Ray went away
                if self._closed.is_set() or self.workers.closed:
                    return
                print(f"[agentgym train] worker monitor: {e}", file=sys.stderr)
            self._closed.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))

    def poll(self) -> list[Fault]:
        """One look: ask every worker, judge, act; returns the new faults."""
        records = {rec["worker"]: rec for rec in self.workers.health(timeout_s=self.interval_s)}
        if self._closed.is_set():
            return []
        faults = self.detector.update(time.monotonic(), records)
        for fault in faults:
            self._handle(fault, records.get(fault.worker, {}))
        return faults

    def _handle(self, fault: Fault, record: dict[str, Any]) -> None:
        self.faults.append(fault)
        dump = None
        if fault.host == socket.gethostname() and fault.pid:
            sections = capture_many([(fault.worker, fault.pid, str(record.get("stacks", "")))])
            dump = write_dump(self.run_dir, fault.worker, fault.kind, fault.message(), sections)
        action = self.action
        print(
            f"[agentgym train] rank {self.rank}: Ray env {fault.message()}; action: {action}"
            + (f" [dump: {dump}]" if dump else ""),
            file=sys.stderr,
            flush=True,
        )
        row = {"time": time.time(), "event": "worker_fault", "rank": self.rank}
        row.update(fault.to_dict())
        row.update(action=action, dump=dump)
        with (self.run_dir / "faults.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=str) + "\n")
        if action == "warn":
            return
        index = record.get("index")
        if isinstance(index, int):
            self.workers.kill_worker(index)
            self.detector.forget(fault.worker)
            self.replaced += 1
        if action == "stop" and self._stop_reason is None:
            self._stop_reason = fault.message()
