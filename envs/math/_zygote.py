"""The grading zygote: ``python -m agentgym.envs.math._zygote CONTROL_FD``.

A small single-threaded process that imports sympy and math-verify once and then forks
grading workers on request, so that a worker killed after a timeout is replaced in
milliseconds rather than the second an import takes. It never imports the user's
``__main__`` (unlike multiprocessing's spawn/forkserver), so grading works from any
script.

Control protocol (a SOCK_SEQPACKET Unix socket, one message per packet):

* ``b"S"`` with one file descriptor attached: fork a worker that serves on that socket;
  the reply is ``b"P"`` + the worker's pid (4 bytes, network order).
* ``b"K"`` + pid: kill that worker (only if it is a live child of this zygote).
* end of file: the parent is gone; kill every worker and exit.

When the parent process dies its end of the control socket closes and the zygote kills
its workers and exits; workers also ask the kernel to kill them if the zygote dies
(``PR_SET_PDEATHSIG``, Linux). Nothing outlives the process that graded.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
import struct
import sys

_PR_SET_PDEATHSIG = 1
#: Extra address space a worker may allocate beyond what it has at fork (bytes).
WORKER_EXTRA_MEMORY = 2 * 1024**3


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


def _limit_memory() -> None:
    try:
        import resource

        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[0])
        size = pages * os.sysconf("SC_PAGE_SIZE") + WORKER_EXTRA_MEMORY
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            size = min(size, hard)
        resource.setrlimit(resource.RLIMIT_AS, (size, hard))
    except Exception:
        pass


def _worker_main(fd: int) -> None:
    """Serve ``(gold, preds, raw, options)`` requests on ``fd`` until end of file; never
    returns. Each reply is ``(status, value, cpu_s)``: the verdicts (or an error) and the
    CPU seconds this worker has used so far, which the pool uses to tell a costly answer
    from a starved worker."""
    import time
    from multiprocessing.connection import Connection

    code = 0
    try:
        _die_with_parent()
        _limit_memory()
        from agentgym.envs.math._check import check

        conn = Connection(fd)
        while True:
            try:
                gold, preds, raw, options = conn.recv()
            except (EOFError, OSError):
                break
            try:
                reply: tuple = ("ok", check(gold, preds, raw, **options))
            except BaseException as e:  # MemoryError, RecursionError, sympy bugs...
                reply = ("error", f"{type(e).__name__}: {str(e)[:200]}")
            conn.send((*reply, time.process_time()))
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _reap(children: set[int]) -> None:
    for pid in list(children):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            children.discard(pid)


def _kill(pid: int, children: set[int], *, wait: bool = True) -> None:
    """SIGKILL a live child. ``wait=False``: do not wait for it to be torn down (a worker
    that grew to gigabytes takes a while); :func:`_reap` collects it later, so the next
    spawn request is answered at once."""
    if pid not in children:
        return
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        done = pid
    if not done:  # still running (a zombie cannot be reused, so the pid is ours)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not wait:
            return  # stays in children until _reap sees it exit
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    children.discard(pid)


#: Checks run once in the zygote so that forked workers start with warm parser caches
#: and compiled regular expressions (the first math-verify call is ~100x slower).
_WARM_UP = (
    ("\\frac{\\sqrt{3}}{2}", ["\\frac{1}{2}\\sqrt{3}", "0.866"]),
    ("x^2+2x+1", ["(x+1)^2"]),
    ("\\{1,2\\}", ["\\{2,1\\}"]),
    ("(1,2)", ["[1,2]", "x\\in(1,2)"]),
    ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", ["\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"]),
    ("2\\pi", ["\\pi\\cdot2", "6.2832"]),
    ("y=2x+3", ["2x+3"]),
    ("x\\le3", ["(-\\infty,3]"]),
    ("1", ["e^{2\\pi i}", "\\sin^2x+\\cos^2x"]),
    ("\\frac{\\pi}{3}", ["\\frac{60\\pi}{180}"]),
)


def _warm_caches() -> None:
    from agentgym.envs.math._check import check

    for gold, preds in _WARM_UP:
        with contextlib.suppress(Exception):
            check(gold, preds)


def main() -> None:
    ctrl = socket.socket(fileno=int(sys.argv[1]))
    # No PR_SET_PDEATHSIG here: it fires when the *thread* that started us exits, and any
    # thread of the parent may start the pool. The parent's death closes the control
    # socket instead, which ends the loop below.
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the parent
    try:
        import agentgym.envs.math._check  # noqa: F401  (preload for the workers)
    except BaseException as e:
        ctrl.send(b"E" + f"{type(e).__name__}: {e}".encode()[:1000])
        return
    _warm_caches()
    # Move every object to a permanent generation, so that the garbage collectors of the
    # forked workers do not touch (and copy-on-write) the preloaded sympy/math-verify heap.
    gc.freeze()
    ctrl.send(b"R")
    children: set[int] = set()
    try:
        while True:
            try:
                msg, fds, _, _ = socket.recv_fds(ctrl, 64, 1)
            except (ConnectionError, OSError):
                break
            if not msg:
                break
            if msg[:1] == b"S" and fds:
                pid = os.fork()
                if pid == 0:
                    ctrl.close()
                    _worker_main(fds[0])
                os.close(fds[0])
                children.add(pid)
                ctrl.send(b"P" + struct.pack("!i", pid))
            elif msg[:1] == b"K" and len(msg) >= 5:
                _kill(struct.unpack("!i", msg[1:5])[0], children, wait=False)
            for fd in fds[1:]:
                os.close(fd)
            _reap(children)
    finally:
        for pid in list(children):  # every kill sent first, then every exit awaited
            _kill(pid, children, wait=False)
        for pid in list(children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    # Nothing is left to flush or close, and tearing down the preloaded sympy heap takes
    # about a second that the parent (waiting at its exit) would spend idle.
    os._exit(0)


if __name__ == "__main__":
    main()
