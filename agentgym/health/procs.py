"""Processes, read from ``/proc`` and signalled: who is alive, a process tree, its state.

What the launcher needs to watch and stop the ranks it started, and what a rank needs
to die with its launcher:

* :func:`alive`, :func:`children`, :func:`descendants`, :func:`proc_state` (``/proc``
  reads; Linux only, empty elsewhere);
* :func:`kill_tree`: SIGTERM, a grace period, then SIGKILL for a tree of processes
  (a stopped process gets SIGCONT so that it can act on the SIGTERM);
* :func:`die_with_parent`: ``prctl(PR_SET_PDEATHSIG)`` through ctypes, so that the
  kernel signals this process when the thread that started it exits.

:func:`alive` is the project's one "is this pid alive" (exported as
:func:`agentgym.health.alive`): the sandbox's owner checks and the Ray workers' reaper
use it too. The standard library only: the reaper, which runs without site-packages,
loads this file by its path.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path

#: prctl option that sets the signal a process gets when its parent dies (linux/prctl.h)
PR_SET_PDEATHSIG = 1


def alive(pid: int) -> bool:
    """Whether a process with this pid exists (zombies count as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return state_letter(pid) not in ("Z", "X")


def state_letter(pid: int) -> str:
    """The one-letter state of ``/proc/<pid>/stat`` (``R``, ``S``, ``T`` stopped, ``Z``
    zombie, ...); ``""`` when it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[0] if ")" in stat else ""


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return int(fields[1]) if len(fields) > 1 else None


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (a scan of ``/proc``)."""
    out = []
    for entry in _pids():
        if _ppid(entry) == pid:
            out.append(entry)
    return out


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` in the process tree (children first)."""
    parent_of = {p: _ppid(p) for p in _pids()}
    out: list[int] = []
    frontier = [pid]
    while frontier:
        nxt = [p for p, pp in parent_of.items() if pp in frontier and p not in out]
        out.extend(nxt)
        frontier = nxt
    return out


def _pids() -> list[int]:
    try:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def proc_state(pid: int) -> str:
    """A readable snapshot of a process from ``/proc``: its status, where each thread
    waits in the kernel (``wchan``) and, when readable, its kernel stack.

    What the launcher records for a process that cannot dump its own Python stacks
    (stopped with SIGSTOP, or stuck in the kernel).
    """
    base = Path(f"/proc/{pid}")
    parts = [f"/proc/{pid} at {time.strftime('%Y-%m-%d %H:%M:%S')}"]
    for name in ("cmdline", "status", "wchan", "stack"):
        try:
            text = (base / name).read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError as e:
            text = f"(not readable: {e.strerror})"
        parts.append(f"--- {name}\n{text.strip()}")
    lines = []
    try:
        tids = sorted(int(t) for t in os.listdir(base / "task"))
    except OSError:
        tids = []
    for tid in tids:
        t = base / "task" / str(tid)
        try:
            comm = (t / "comm").read_text().strip()
            wchan = (t / "wchan").read_text().strip() or "-"
        except OSError:
            continue
        lines.append(f"{tid:>8} {state_letter_of(t):>2} {wchan:<28} {comm}")
    parts.append("--- threads (tid, state, wchan, name)\n" + "\n".join(lines))
    return "\n".join(parts) + "\n"


def state_letter_of(task_dir: Path) -> str:
    """The state letter of a thread's ``stat`` file (``/proc/<pid>/task/<tid>``)."""
    try:
        stat = (task_dir / "stat").read_text()
    except OSError:
        return "?"
    return stat.rpartition(")")[2].split()[0] if ")" in stat else "?"


def kill_tree(pids: Iterable[int], *, grace_s: float = 5.0) -> list[int]:
    """End processes: SIGCONT + SIGTERM, wait up to ``grace_s``, then SIGKILL.

    Returns the pids that were still alive when SIGKILL was sent.
    """
    targets = [p for p in dict.fromkeys(pids) if p > 0 and p != os.getpid()]
    for sig in (signal.SIGCONT, signal.SIGTERM):
        for p in targets:
            _signal(p, sig)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(p) for p in targets):
        time.sleep(0.05)
    stubborn = [p for p in targets if alive(p)]
    for p in stubborn:
        _signal(p, signal.SIGKILL)
    return stubborn


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent exits.

    Returns False where this is not available (not Linux, no libc). The setting belongs
    to the thread that forked this process: call it in a process whose parent started it
    from its main thread (torchrun and the agentgym launcher do).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def pdeathsig_preexec(sig: int = signal.SIGTERM):
    """A ``preexec_fn`` for :class:`subprocess.Popen`: the child gets ``sig`` when the
    process that started it dies (kill -9 of the launcher included)."""

    def set_it() -> None:
        die_with_parent(sig)

    return set_it
