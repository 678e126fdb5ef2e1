"""A pool of grading worker processes with a hard wall-clock bound per request.

Why processes: sympy can run for hours (or exhaust memory) on inputs such as
``9^{9^{9^9}}``, and a Python thread cannot be interrupted; math-verify's own timeouts use
``signal.alarm`` and only work in the main thread. A worker that misses its deadline is
killed (SIGKILL) and replaced; the caller gets a timeout verdict at the deadline.

How: one *zygote* process (:mod:`agentgym.envs.math._zygote`) imports sympy and
math-verify once, then forks workers on request (milliseconds each). Each worker owns
one socket to this process; a request is ``(gold, [preds], raw)`` and the reply a list
of verdicts. Idle workers wait in a queue; a caller takes one, so any number of threads may
grade at once (waiting for a free worker counts against the caller's deadline).

Start-up (about a second, once per process) happens on first use or on
:func:`warm_up`; it is not counted against the deadline. The pool shuts down at exit;
the zygote also exits (killing its workers) when this process dies, because that
closes the control socket, and workers die with the zygote (``PR_SET_PDEATHSIG``).

Size: ``AGENTGYM_GRADING_WORKERS`` or ``max(2, min(8, cpu_count // 2))``.
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

__all__ = ["GradingPool", "PoolError", "get_pool", "shutdown_pool", "warm_up"]

#: Longest wait for the zygote to import sympy and math-verify.
START_TIMEOUT_S = 120.0


class PoolError(RuntimeError):
    """The grading processes could not be started."""


@dataclass
class _Worker:
    pid: int
    conn: Connection


def default_size() -> int:
    env = os.environ.get("AGENTGYM_GRADING_WORKERS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise PoolError(
                f"AGENTGYM_GRADING_WORKERS must be a positive integer, got {env!r}."
            ) from None
        if n < 1:
            raise PoolError(f"AGENTGYM_GRADING_WORKERS must be >= 1, got {n}.")
        return n
    return max(2, min(8, (os.cpu_count() or 2) // 2))


class GradingPool:
    """Worker processes that run :func:`agentgym.envs.math._check.check` under a deadline.

    Args:
        size: number of worker processes.
    """

    def __init__(self, size: int | None = None) -> None:
        self.size = size or default_size()
        self._lock = threading.Lock()  # start/stop
        self._ctrl_lock = threading.Lock()  # one control request at a time
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._zygote: subprocess.Popen | None = None
        self._ctrl: socket.socket | None = None
        self._closed = False
        self._ready = False  # workers spawned (set last in start, under _lock)
        self.replaced = 0  # workers killed after a timeout or a crash (for tests/metrics)

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
            self._idle = queue.Queue()
            for _ in range(self.size):
                self._idle.put(self._spawn())
            self._ready = True

    def shutdown(self) -> None:
        """Stop every process. The pool cannot be used afterwards."""
        with self._lock:
            self._closed = True
            self._stop_locked()

    def _stop_locked(self) -> None:
        self._ready = False
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
        if self._zygote is not None:
            try:
                self._zygote.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._kill_zygote()
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
        return _Worker(pid, Connection(mine.detach()))

    def _discard(self, w: _Worker) -> None:
        with contextlib.suppress(OSError):
            w.conn.close()
        ctrl = self._ctrl
        if ctrl is not None:
            with self._ctrl_lock, contextlib.suppress(OSError):
                ctrl.send(b"K" + struct.pack("!i", w.pid))
        self.replaced += 1

    def _replace(self, w: _Worker) -> None:
        self._discard(w)
        try:
            self._idle.put(self._spawn())
        except PoolError:
            # the zygote died: the next call restarts everything (outside its deadline)
            with contextlib.suppress(OSError):
                if self._zygote is not None:
                    self._zygote.kill()

    # ------------------------------------------------------------------ requests
    def run(
        self, gold: str, preds: list[str], timeout_s: float, *, raw: bool = False
    ) -> tuple[str, Any]:
        """Check ``preds`` against ``gold`` within ``timeout_s`` seconds.

        ``raw``: the answers are not normalised yet (see ``_check.check``).

        Returns ``("ok", [bool, ...])``, ``("timeout", None)`` or ``("error", message)``.
        The time to start the pool is not counted; the wait for a free worker is.
        """
        if not self.started:
            self.start()
        deadline = time.monotonic() + timeout_s
        try:
            w = self._idle.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return "timeout", None
        try:
            w.conn.send((gold, preds, raw))
            if not w.conn.poll(max(0.0, deadline - time.monotonic())):
                self._replace(w)
                return "timeout", None
            status, value = w.conn.recv()
        except (EOFError, OSError) as e:
            self._replace(w)
            return "error", f"grading worker died ({type(e).__name__})"
        if status == "error" and value.startswith("MemoryError"):
            self._replace(w)  # a worker that ran out of memory may be in a bad state
        else:
            self._idle.put(w)
        return status, value


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
