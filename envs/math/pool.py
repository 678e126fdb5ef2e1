"""A pool of grading worker processes with a hard wall-clock bound per request.

Why processes: sympy can run for hours (or exhaust memory) on inputs such as
``9^{9^{9^9}}``, and a Python thread cannot be interrupted; math-verify's own timeouts use
``signal.alarm`` and only work in the main thread. A worker that misses its deadline is
killed (SIGKILL) and replaced; the caller gets a timeout verdict at the deadline.

How: one *zygote* process (:mod:`agentgym.envs.math._zygote`) imports sympy and
math-verify once, then forks workers on request (milliseconds each). Each worker owns
one socket to this process; a request is ``(gold, [preds], raw)`` and the reply a list
of verdicts. Idle workers wait in a queue; a caller takes one, so any number of threads may
grade at once.

Capacity scales with the callers: when no worker is idle the pool forks another one
(milliseconds), up to ``max_size``; only beyond that does a caller wait in the queue.
The deadline counts the *grading*, from the moment a worker takes the request; the wait
for a worker is bounded separately (``queue_timeout_s``). At the deadline the CPU time
the worker spent on the request decides:

* at least half the deadline (``COSTLY_CPU_SHARE``: 0.75 s at the default 1.5 s, while
  a right answer costs 1-50 ms on an idle machine): the answer itself is too costly to
  check (``"timeout"``, the caller's verdict is wrong), so on a machine that gives the
  worker half a core an expensive answer is cut at the deadline. The caller may also
  say that the answer *looks* costly (``may_starve=False``: a power tower, a huge
  exponent or factorial): then it is cut at the deadline however busy the machine;
* less: the worker was starved by a busy machine, not slowed down by the answer. It is
  given more time, until it has used that CPU budget (``"timeout"``), answers, or
  ``STARVED_WALL_FACTOR`` times the deadline has passed (``"starved"``: no verdict, an
  infrastructure failure). So a right answer is not lost to a machine that is merely
  busy, and only an overloaded one makes a call outlast the deadline.

Start-up (about a second, once per process) happens on first use or on
:func:`warm_up`; it is not counted against the deadline. The pool shuts down at exit;
the zygote also exits (killing its workers) when this process dies, because that
closes the control socket, and workers die with the zygote (``PR_SET_PDEATHSIG``).

Size: ``AGENTGYM_GRADING_WORKERS`` workers at start (default ``max(2, min(8, cores //
2))``), plus spares up to 8 kept ready (forked at start), growing on demand up to
``AGENTGYM_GRADING_MAX_WORKERS`` (default ``min(32, max(8, 2 * cores))``); each worker
costs about 15 MB of private memory.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from agentgym.health import alive

__all__ = [
    "QUEUE_TIMEOUT_S",
    "GradingPool",
    "PoolError",
    "PoolReply",
    "get_pool",
    "shutdown_pool",
    "warm_up",
]

#: Workers kept ready (forked at start), at most ``max_size``.
WARM_WORKERS = 8
#: Longest wait for the zygote to import sympy and math-verify.
START_TIMEOUT_S = 120.0
#: Default bound on the wait for a free worker (separate from the grading deadline).
QUEUE_TIMEOUT_S = 30.0
#: CPU time, as a share of the deadline, after which a check that missed its deadline is
#: too costly: the answer's fault, not the machine's. Right answers use far less (1-50 ms
#: on an idle machine; CPU time itself grows on a thrashing one).
COSTLY_CPU_SHARE = 1 / 2
#: A starved check (less CPU than that at the deadline) may run this many deadlines long
#: before it is given up as an infrastructure failure.
STARVED_WALL_FACTOR = 4.0
#: How often a starved check's CPU time is read while it is given more time.
_STARVED_POLL_S = 0.05
#: Longest wait at shutdown for the zygote to kill and collect its workers; then it is
#: killed, and its workers die with it (``PR_SET_PDEATHSIG``), awaited as long again.
STOP_TIMEOUT_S = 5.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _await_exit(pids: set[int], timeout_s: float) -> None:
    """Wait until none of ``pids`` runs, at most ``timeout_s`` (a pid reused meanwhile by
    another process costs that wait, nothing more: nothing is sent to it)."""
    end = time.monotonic() + timeout_s
    while any(alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.02)


class PoolError(RuntimeError):
    """The grading processes could not be started."""


@dataclass
class _Worker:
    pid: int
    conn: Connection
    cpu_s: float = 0.0  # CPU seconds the worker had used at its last reply


@dataclass(frozen=True)
class PoolReply:
    """What :meth:`GradingPool.request` returns.

    Attributes:
        status: ``"ok"`` (``value`` holds the verdicts), ``"timeout"`` (the check missed
            its deadline having used half of it in CPU, or looked costly: the answer is
            too costly),
            ``"starved"`` (the worker got too little CPU to finish even with extra time:
            the machine is overloaded),
            ``"busy"`` (no worker came free within the queue bound), ``"crashed"`` (the
            worker died) or ``"error"`` (the check raised; ``value`` says what).
        value: the verdicts, or an error message, or ``None``.
        wait_s: seconds spent waiting for a worker (not part of the deadline).
        cpu_s: CPU seconds the worker spent on the request (``None`` when unknown).
    """

    status: str
    value: Any = None
    wait_s: float = 0.0
    cpu_s: float | None = None


class _Idle(queue.Queue):
    """Idle workers, the most recently used first (``queue[0]`` is taken next).

    A caller that grades one answer at a time keeps reusing one worker, whose sympy and
    parser caches are warm; a burst of callers spreads over the rest.
    """

    def _put(self, item: _Worker) -> None:
        self.queue.appendleft(item)


def _env_int(name: str) -> int | None:
    env = os.environ.get(name)
    if not env:
        return None
    try:
        n = int(env)
    except ValueError:
        raise PoolError(f"{name} must be a positive integer, got {env!r}.") from None
    if n < 1:
        raise PoolError(f"{name} must be >= 1, got {n}.")
    return n


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 2


def default_size() -> int:
    """Workers started with the pool: ``AGENTGYM_GRADING_WORKERS`` or ``max(2, min(8,
    cores // 2))``."""
    n = _env_int("AGENTGYM_GRADING_WORKERS")
    return n if n is not None else max(2, min(8, _cores() // 2))


def default_max_size() -> int:
    """Most workers the pool grows to: ``AGENTGYM_GRADING_MAX_WORKERS`` or ``min(32,
    max(8, 2 * cores))``."""
    n = _env_int("AGENTGYM_GRADING_MAX_WORKERS")
    return n if n is not None else min(32, max(8, 2 * _cores()))


def _process_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used, from /proc (Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return None


class GradingPool:
    """Worker processes that run :func:`agentgym.envs.math._check.check` under a deadline.

    Args:
        size: worker processes started with the pool.
        max_size: most worker processes the pool grows to when callers find none idle
            (at least ``size``).
    """

    def __init__(self, size: int | None = None, max_size: int | None = None) -> None:
        self.size = size or default_size()
        self.max_size = max(self.size, max_size or default_max_size())
        #: workers kept ready (forked at start, milliseconds each), so that a burst of
        #: callers does not wait for forks; at least ``size``
        self.warm_size = min(self.max_size, max(self.size, WARM_WORKERS))
        self._workers = 0  # workers alive or being started (grows up to max_size)
        self._grow_lock = threading.Lock()
        self._lock = threading.Lock()  # start/stop
        self._ctrl_lock = threading.Lock()  # one control request at a time
        self._idle: queue.Queue[_Worker] = _Idle()
        self._zygote: subprocess.Popen | None = None
        self._ctrl: socket.socket | None = None
        self._closed = False
        self._ready = False  # workers spawned (set last in start, under _lock)
        self.replaced = 0  # workers killed after a timeout or a crash (for tests/metrics)
        self._pids: set[int] = set()  # workers forked, until shutdown sees them gone

    # ------------------------------------------------------------------ lifecycle
    @property
    def started(self) -> bool:
        """The pool is up: the zygote runs and the workers were spawned."""
        return self._ready and self._zygote is not None and self._zygote.poll() is None

    def start(self) -> None:
        """Start the zygote and the workers (blocking; idempotent)."""
        with self._lock:
            if self._closed:
                raise PoolError("The grading pool was shut down.")
            if self.started:
                return
            self._stop_locked()
            parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                self._zygote = subprocess.Popen(
                    [sys.executable, "-m", "agentgym.envs.math._zygote", str(child.fileno())],
                    pass_fds=(child.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    close_fds=True,
                )
            finally:
                child.close()
            parent.settimeout(START_TIMEOUT_S)
            try:
                hello = parent.recv(1100)
            except OSError as e:
                hello = f"E{type(e).__name__}: {e}".encode()
            if hello != b"R":
                parent.close()
                self._kill_zygote()
                detail = hello[1:].decode(errors="replace") if hello else "it exited"
                raise PoolError(
                    f"The grading zygote did not start ({detail}). Check that sympy and "
                    "math-verify import in this environment (`python -c 'import "
                    "math_verify'`)."
                )
            parent.settimeout(30.0)
            self._ctrl = parent
            self._idle = _Idle()
            for _ in range(self.size):
                self._idle.put(self._spawn())
            for _ in range(self.warm_size - self.size):
                self._idle.put(self._spawn())
            self._workers = self.warm_size
            self._ready = True

    def shutdown(self) -> None:
        """Stop every process. The pool cannot be used afterwards. A start under way (the
        zygote still importing sympy, about a second) is cut short, not waited for: a run
        that ends before its first grading call exits at once."""
        self._closed = True
        starting = self._zygote
        if not self._ready and starting is not None and starting.poll() is None:
            starting.kill()  # start() sees it exit, gives up and lets go of the lock
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        self._ready = False
        self._workers = 0
        while True:
            try:
                w = self._idle.get_nowait()
            except queue.Empty:
                break
            with contextlib.suppress(OSError):
                w.conn.close()
        if self._ctrl is not None:
            with contextlib.suppress(OSError):
                self._ctrl.close()  # the zygote sees EOF, kills its workers and exits
            self._ctrl = None
        pids, self._pids = self._pids, set()
        if self._zygote is not None:
            try:
                self._zygote.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:  # a machine too busy to let it finish
                self._kill_zygote()
                _await_exit(pids, STOP_TIMEOUT_S)
            self._zygote = None

    def _kill_zygote(self) -> None:
        if self._zygote is not None and self._zygote.poll() is None:
            self._zygote.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._zygote.wait(timeout=5)

    # ------------------------------------------------------------------ workers
    def _spawn(self) -> _Worker:
        ctrl = self._ctrl
        if ctrl is None:
            raise PoolError("The grading pool is not running.")
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self._ctrl_lock:
                socket.send_fds(ctrl, [b"S"], [theirs.fileno()])
                reply = ctrl.recv(16)
        except OSError as e:
            mine.close()
            raise PoolError(f"The grading zygote is gone ({e}).") from e
        finally:
            theirs.close()
        if len(reply) != 5 or reply[:1] != b"P":
            mine.close()
            raise PoolError("The grading zygote sent an unexpected reply.")
        pid = struct.unpack("!i", reply[1:5])[0]
        if len(self._pids) >= 4 * self.max_size:  # a long run replaces many workers
            self._pids = {p for p in self._pids if alive(p)}
        self._pids.add(pid)
        return _Worker(pid, Connection(mine.detach()))

    def _discard(self, w: _Worker) -> None:
        with contextlib.suppress(OSError):
            w.conn.close()
        ctrl = self._ctrl
        if ctrl is not None:
            # no lock: a kill gets no reply, and one packet cannot interleave with a spawn
            # request and its reply (SOCK_SEQPACKET), so it never waits behind a fork
            with contextlib.suppress(OSError):
                ctrl.send(b"K" + struct.pack("!i", w.pid))
        self.replaced += 1

    def _replace(self, w: _Worker) -> None:
        """Kill ``w`` and, when the pool falls below ``warm_size``, fork another in the
        background, so that the caller (and a burst of timeouts) returns at once."""
        self._discard(w)
        with self._grow_lock:
            self._workers -= 1
            refill = self._workers < self.warm_size
        if refill:
            threading.Thread(target=self._refill, daemon=True).start()

    def _refill(self) -> None:
        with self._grow_lock:
            if self._workers >= self.warm_size:
                return
            self._workers += 1
        try:
            self._idle.put(self._spawn())
        except PoolError:
            # the zygote died: the next call restarts everything (outside its deadline)
            with self._grow_lock:
                self._workers -= 1
            with contextlib.suppress(OSError):
                if self._zygote is not None:
                    self._zygote.kill()

    def _take(self, queue_timeout_s: float) -> _Worker | None:
        """An idle worker, a new one while below ``max_size``, else wait for one."""
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._grow_lock:
            grow = self._workers < self.max_size
            if grow:
                self._workers += 1
        if grow:
            try:
                return self._spawn()
            except PoolError:
                with self._grow_lock:
                    self._workers -= 1
        try:
            return self._idle.get(timeout=max(0.0, queue_timeout_s))
        except queue.Empty:
            return None

    @property
    def workers(self) -> int:
        """Worker processes alive now (between ``size`` and ``max_size``)."""
        return self._workers

    # ------------------------------------------------------------------ requests
    def run(
        self,
        gold: str,
        preds: list[str],
        timeout_s: float,
        *,
        raw: bool = False,
        options: dict[str, Any] | None = None,
        queue_timeout_s: float = QUEUE_TIMEOUT_S,
    ) -> tuple[str, Any]:
        """:meth:`request` reduced to ``(status, value)``."""
        reply = self.request(
            gold, preds, timeout_s, raw=raw, options=options, queue_timeout_s=queue_timeout_s
        )
        return reply.status, reply.value

    def request(
        self,
        gold: str,
        preds: list[str],
        timeout_s: float,
        *,
        raw: bool = False,
        options: dict[str, Any] | None = None,
        queue_timeout_s: float = QUEUE_TIMEOUT_S,
        may_starve: bool = True,
    ) -> PoolReply:
        """Check ``preds`` against ``gold``, with ``timeout_s`` seconds of grading.

        Args:
            gold, preds: normalised answers (``raw``: as extracted; see ``_check.check``).
            timeout_s: the grading deadline, counted from the moment a worker takes the
                request.
            options: comparison options for ``_check.check`` (``{"degrees": True}``).
            queue_timeout_s: longest wait for a free worker (not counted in
                ``timeout_s``); the pool first grows up to ``max_size`` workers.
            may_starve: a check starved of CPU at its deadline gets extra time (up to
                ``STARVED_WALL_FACTOR`` deadlines). ``False`` for answers that look costly
                (a power tower): they are cut at the deadline, as the answer's fault.

        Returns:
            A :class:`PoolReply`. The time to start the pool is not counted anywhere.
        """
        if not self.started:
            self.start()
        t0 = time.monotonic()
        w = self._take(queue_timeout_s)
        started = time.monotonic()
        wait_s = started - t0
        if w is None:
            return PoolReply("busy", None, wait_s)
        try:
            w.conn.send((gold, preds, raw, options or {}))
            if not w.conn.poll(timeout_s):
                late = self._late(w, started, timeout_s, may_starve)
                if late is not None:
                    self._replace(w)
                    return PoolReply(late[0], None, wait_s, late[1])
            status, value, cpu_s = w.conn.recv()
        except (EOFError, OSError) as e:
            self._replace(w)
            return PoolReply("crashed", f"grading worker died ({type(e).__name__})", wait_s)
        used = max(0.0, cpu_s - w.cpu_s)
        w.cpu_s = cpu_s
        if status == "error" and value.startswith("MemoryError"):
            self._replace(w)  # a worker that ran out of memory may be in a bad state
        else:
            self._idle.put(w)
        return PoolReply(status, value, wait_s, used)

    def _late(
        self, w: _Worker, started: float, timeout_s: float, may_starve: bool = True
    ) -> tuple[str, float | None] | None:
        """A worker missed its deadline: ``("timeout", cpu)`` for a costly answer,
        ``("starved", cpu)`` when the machine gave it too little CPU for too long, or
        ``None`` when it answered in the extra time a starved worker gets."""
        budget = COSTLY_CPU_SHARE * timeout_s
        cap = started + STARVED_WALL_FACTOR * timeout_s
        if not may_starve:
            now_cpu = _process_cpu_s(w.pid)
            return "timeout", None if now_cpu is None else max(0.0, now_cpu - w.cpu_s)
        while True:
            now_cpu = _process_cpu_s(w.pid)
            if now_cpu is None:
                return "timeout", None  # no /proc: cannot tell, the answer's fault as before
            used = max(0.0, now_cpu - w.cpu_s)
            if used >= budget:
                return "timeout", used
            if time.monotonic() >= cap:
                return "starved", used
            if w.conn.poll(_STARVED_POLL_S):
                return None


_POOL: GradingPool | None = None
_POOL_LOCK = threading.Lock()
_WARMING: set[GradingPool] = set()


def get_pool() -> GradingPool:
    """The process-wide pool (created on first use, started lazily)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = GradingPool()
        return _POOL


def warm_up(*, block: bool = True) -> None:
    """Start the pool now (``block=False``: in a background thread) so that the first
    grading call does not wait for start-up."""
    pool = get_pool()
    if pool.started:
        return
    if block:
        pool.start()
        return
    with _POOL_LOCK:
        if pool in _WARMING:
            return  # a background start is already under way
        _WARMING.add(pool)
    threading.Thread(target=_quiet_start, args=(pool,), daemon=True).start()


def _quiet_start(pool: GradingPool) -> None:
    try:
        with contextlib.suppress(Exception):
            pool.start()
    finally:
        with _POOL_LOCK:
            _WARMING.discard(pool)


def shutdown_pool() -> None:
    """Stop the process-wide pool (a later call to :func:`get_pool` makes a new one)."""
    global _POOL
    with _POOL_LOCK:
        pool, _POOL = _POOL, None
    if pool is not None:
        pool.shutdown()


def _forget_in_child() -> None:
    # a fork of this process must not share our sockets and workers
    global _POOL, _POOL_LOCK, _WARMING
    _POOL = None
    _POOL_LOCK = threading.Lock()
    _WARMING = set()


atexit.register(shutdown_pool)
os.register_at_fork(after_in_child=_forget_in_child)
