"""The rank side of fault detection: a heartbeat file per rank, written by a thread.

Every rank of a multi-process run writes ``<run>/health/rank<r>.json`` once per
``health.heartbeat_s`` from a daemon thread (a Python thread: it keeps beating while the
main thread waits in a collective, and stops when the process is stopped, dies or holds
the GIL in C code). A heartbeat carries:

* who: rank, world size, host, pid, start time, a sequence number;
* where: the step and the phase the loop is in (and for how long);
* cumulative counters the detector turns into rates: CPU seconds, CPU demand (seconds
  its threads ran or waited to run: :class:`CpuDemand`), seconds spent in collectives
  (including a wait in progress), seconds the engine generated, tokens generated,
  non-finite losses;
* gauges: resident memory, the current collective and how long it has waited, the last
  collective's duration, the last step's phase times and compute time (the step minus
  its time in collectives).

The same thread watches the launcher (``$AGENTGYM_LAUNCHER_PID``): when it is gone, the
rank exits at once, so a kill -9 of ``agentgym train`` leaves no orphan training. Each
rank also registers :mod:`faulthandler` on SIGUSR2, so that the launcher can ask any rank
for its Python stacks (they go to ``health/stacks/rank<r>.txt``).
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import json
import math
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from agentgym.health.lock import LAUNCHER_ENV
from agentgym.health.procs import alive, die_with_parent

HEALTH_DIR = "health"
STOP_FILE = "stop.json"
#: the signal on which every rank writes its Python stacks (faulthandler)
STACKS_SIGNAL = signal.SIGUSR2
#: exit status of a rank that stops because its launcher asked it to (a detected fault)
EXIT_STOPPED = 3
#: exit status of a rank whose launcher is gone
EXIT_ORPHAN = 4


class CollectiveClock:
    """Time spent in this process's collectives: cumulative, the one in progress, the
    last one's. The small collectives of :mod:`~agentgym.trainers.distributed` report
    here (:data:`COLLECTIVES`); the strategies' gradient reductions inside the backward
    pass do not."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = 0.0
        self._current: tuple[str, float] | None = None
        self.last_s = 0.0
        self.last_name = ""

    @contextlib.contextmanager
    def track(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        with self._lock:
            self._current = (name, t0)
        try:
            yield
        finally:
            dt = time.monotonic() - t0
            with self._lock:
                self._done += dt
                self._current = None
                self.last_s, self.last_name = dt, name

    def snapshot(self) -> tuple[float, str, float]:
        """``(cumulative seconds incl. the wait in progress, current op or "", its wait)``."""
        now = time.monotonic()
        with self._lock:
            if self._current is None:
                return self._done, "", 0.0
            name, t0 = self._current
            return self._done + (now - t0), name, now - t0


#: this process's collectives (one process group per process)
COLLECTIVES = CollectiveClock()


def rss_mb() -> float:
    """Resident memory of this process in MiB (``/proc/self/statm``; peak RSS elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (2**20 if sys.platform == "darwin" else 1024)


class CpuDemand:
    """Seconds this process's threads ran or waited to run (on a CPU, or runnable in the
    run queue, which includes time throttled by a CPU quota), summed over its threads
    from ``/proc/self/task/*/schedstat`` (Linux; 0 elsewhere).

    A rank that waits for its peers in a collective is blocked and adds nothing; a rank
    starved of CPU (a noisy neighbour, a quota) adds wall time on every thread that wants
    to run. Threads that ended keep what they added.
    """

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._total = 0.0

    def __call__(self) -> float:
        try:
            tids = os.listdir("/proc/self/task")
        except OSError:
            return 0.0
        seen = {}
        for tid in tids:
            try:
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    run_ns, wait_ns, _ = f.read().split()
            except (OSError, ValueError):
                continue
            now = (int(run_ns) + int(wait_ns)) / 1e9
            self._total += max(0.0, now - self._last.get(tid, 0.0))
            seen[tid] = now
        self._last = seen
        return self._total


def guard_parent() -> None:
    """At a rank's start-up: die with the parent (torchrun), and exit at once when the
    parent or the agentgym launcher is already gone (started from a dying launcher)."""
    parent = os.getppid()
    die_with_parent(signal.SIGKILL)
    launcher = os.environ.get(LAUNCHER_ENV, "")
    # (a parent of pid 1 may be legitimate: torchrun as a container's first process)
    orphan = os.getppid() != parent
    if launcher.isdigit() and not alive(int(launcher)):
        orphan = True
    if orphan:
        print(
            "[agentgym train] this rank's launcher is gone; exiting (no orphan training).",
            file=sys.stderr,
        )
        os._exit(EXIT_ORPHAN)


class RankHeartbeat:
    """Writes this rank's heartbeat file every ``interval_s`` (see the module docstring).

    Args:
        run_dir: the run folder (the file goes to ``<run_dir>/health/rank<rank>.json``).
        rank / world_size / local_rank: this process's place in the job.
        interval_s: seconds between heartbeats.
        gen_seconds: cumulative seconds the rollout engine spent generating.
        tokens: cumulative tokens the engine generated.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        rank: int,
        world_size: int,
        local_rank: int = 0,
        interval_s: float = 1.0,
        gen_seconds: Callable[[], float] = lambda: 0.0,
        tokens: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.dir = Path(run_dir) / HEALTH_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / f"rank{rank}.json"
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.interval_s = interval_s
        self._gen_seconds, self._tokens = gen_seconds, tokens
        self.started = time.time()
        self._seq = 0
        self._step = 0
        self._phase = ("start", time.monotonic())
        self._nonfinite = 0
        self._last_step: dict[str, Any] = {}
        self._step_mark = (time.monotonic(), 0.0)  # (start of the step, collective seconds)
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._stop = threading.Event()
        self._done = False
        launcher = os.environ.get(LAUNCHER_ENV, "")
        self._launcher = int(launcher) if launcher.isdigit() else None
        self._stacks: IO[str] | None = None
        self._demand = CpuDemand()
        self._register_stacks()
        self._beat()
        self._thread = threading.Thread(
            target=self._run, name=f"agentgym-heartbeat-rank{rank}", daemon=True
        )
        self._thread.start()
        atexit.register(self.finish)

    # ------------------------------------------------------------------ the loop's hooks
    def phase(self, name: str) -> None:
        """The loop entered phase ``name`` (``rollout``, ``train``, ``eval``, ...)."""
        with self._lock:
            self._phase = (name, time.monotonic())

    def step_started(self) -> None:
        """A step begins: its compute time is measured from here."""
        with self._lock:
            self._step_mark = (time.monotonic(), COLLECTIVES.snapshot()[0])
        self.phase("rollout")

    def step_done(self, step: int, metrics: Mapping[str, Any]) -> None:
        """A step ended with ``metrics`` (the loop's row): record its times and losses."""
        now = time.monotonic()
        coll = COLLECTIVES.snapshot()[0]
        with self._lock:
            t0, c0 = self._step_mark
            step_s = now - t0
            self._step = step
            loss = metrics.get("losses/total")
            finite = loss is None or (isinstance(loss, (int, float)) and math.isfinite(loss))
            if not finite:
                self._nonfinite += 1
            self._last_step = {
                "step": step,
                "step_s": step_s,
                "collective_s": coll - c0,
                "compute_s": max(0.0, step_s - (coll - c0)),
                "phases": {
                    k.removeprefix("time/").removesuffix("_s"): v
                    for k, v in metrics.items()
                    if k.startswith("time/") and isinstance(v, (int, float))
                },
                "loss": loss if finite else str(loss),
            }
            self._phase = ("between steps", now)
        self._beat()

    def stop_requested(self) -> int:
        """Whether the launcher asked the ranks to stop (``health/stop.json``): 0 no,
        1 stop, 2 stop after saving a checkpoint."""
        path = self.dir / STOP_FILE
        if not path.exists():
            return 0
        try:
            save = bool(json.loads(path.read_text(encoding="utf-8")).get("checkpoint", True))
        except (OSError, ValueError, AttributeError):
            save = True
        return 2 if save else 1

    def finish(self) -> None:
        """The process is exiting normally: write a last heartbeat marked ``done`` (the
        detector then stops expecting beats from it) and stop."""
        if self._done:
            return
        self._done = True
        self.phase("done")
        self.close()
        with contextlib.suppress(Exception):
            self._beat()

    def close(self) -> None:
        """Stop beating (the file stays, with the last state)."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=2 * self.interval_s + 1)
        if self._stacks is not None:
            with contextlib.suppress(Exception):
                faulthandler.unregister(STACKS_SIGNAL)
            self._stacks.close()
            self._stacks = None

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self._launcher is not None and not alive(self._launcher):
                print(
                    f"[agentgym train] rank {self.rank}: the launcher (pid {self._launcher}) "
                    "is gone; exiting.",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(EXIT_ORPHAN)
            try:
                self._beat()
            except Exception as e:  # a full disk must not kill training
                print(f"[agentgym train] heartbeat not written: {e}", file=sys.stderr)

    def record(self) -> dict[str, Any]:
        """The heartbeat as written (a JSON object)."""
        coll, op, wait = COLLECTIVES.snapshot()
        now = time.monotonic()
        with self._lock:
            self._seq += 1
            phase, since = self._phase
            rec = {
                "kind": "rank",
                "worker": f"rank{self.rank}",
                "rank": self.rank,
                "world_size": self.world_size,
                "local_rank": self.local_rank,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "started": self.started,
                "seq": self._seq,
                "t": time.time(),
                "step": self._step,
                "phase": phase,
                "phase_s": now - since,
                "counters": {
                    "cpu_s": time.process_time(),
                    "demand_s": self._demand(),
                    "collective_s": coll,
                    "gen_s": float(self._gen_seconds()),
                    "tokens": float(self._tokens()),
                    "nonfinite": self._nonfinite,
                },
                "gauges": {
                    "rss_mb": rss_mb(),
                    "collective_wait_s": wait,
                    "last_collective_s": COLLECTIVES.last_s,
                    **({"step_compute_s": self._last_step["compute_s"]} if self._last_step else {}),
                },
                "collective": op,
                "last_step": self._last_step,
                "stacks": str(self._stacks_path),
                "done": self._done,
            }
        return rec

    def _beat(self) -> None:
        with self._write_lock:  # the thread and the loop's step_done both write
            rec = self.record()
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(rec), encoding="utf-8")
            os.replace(tmp, self.path)

    def _register_stacks(self) -> None:
        stacks = self.dir / "stacks"
        stacks.mkdir(exist_ok=True)
        self._stacks_path = stacks / f"rank{self.rank}.txt"
        try:
            self._stacks = open(self._stacks_path, "a", encoding="utf-8")  # noqa: SIM115
            faulthandler.register(STACKS_SIGNAL, file=self._stacks, all_threads=True)
        except (OSError, RuntimeError, ValueError):
            self._stacks = None


class IntervalTotal:
    """The total length of a growing list of ``(start, end)`` intervals (an engine's
    ``busy`` list), summed incrementally; for :class:`RankHeartbeat`'s ``gen_seconds``."""

    def __init__(self, intervals: list[tuple[float, float]]) -> None:
        self.intervals = intervals
        self._seen = 0
        self._total = 0.0

    def __call__(self) -> float:
        n = len(self.intervals)
        if n < self._seen:  # the list was cleared (reset_stats)
            self._seen = 0
        for a, b in self.intervals[self._seen : n]:
            self._total += b - a
        self._seen = n
        return self._total


class RunStopped(RuntimeError):
    """The ranks stopped at the end of a step because the launcher asked them to (a fault
    was detected); a checkpoint of that step was saved first. Exit status
    :data:`EXIT_STOPPED`."""

    exit_code = EXIT_STOPPED
