"""Process lifecycle of a local run: start the command under rlimits, learn its namespace
init, and kill everything it started without leaving a zombie."""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import select
import signal
import subprocess
import time

from agentgym.sandbox.limits import SandboxLimits
from agentgym.sandbox.procfs import process_start_ticks

__all__ = ["Killer", "exited", "read_child_pid", "rlimits_for", "start_process"]


def rlimits_for(
    limits: SandboxLimits, seconds: float, uid: int, *, nproc_inside: bool = False
) -> list[tuple[int, int]]:
    """The rlimits every process of a run gets (``uid`` runs it; ``seconds`` is its timeout).

    With ``nproc_inside`` the process limit is left out: the wrapper sets it inside the
    command's user namespace, where only the namespace's tasks count. Otherwise it is
    ``pids`` on top of the tasks ``uid`` runs now, a bound that moves when the user's
    other processes come and go.
    """
    cpu = limits.cpu_seconds or math.ceil(seconds) + 5
    mib = 1024 * 1024
    nproc = [] if nproc_inside else [(resource.RLIMIT_NPROC, _user_tasks(uid) + limits.pids)]
    return [
        (resource.RLIMIT_AS, limits.memory_mb * mib),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_NOFILE, limits.nofile),
        (resource.RLIMIT_FSIZE, limits.workspace_mb * mib),
        (resource.RLIMIT_CORE, 0),
        *nproc,
    ]


def _user_tasks(uid: int) -> int:
    """How many tasks (threads) user ``uid`` runs now, from ``/proc``."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as f:
                text = f.read()
        except OSError:
            continue
        real_uid = threads = None
        for line in text.splitlines():
            if line.startswith(b"Uid:"):
                real_uid = int(line.split()[1])
            elif line.startswith(b"Threads:"):
                threads = int(line.split()[1])
        if real_uid == uid and threads:
            total += threads
    return total


def start_process(
    argv: list[str],
    *,
    with_stdin: bool,
    cwd: str,
    env: dict[str, str],
    rlimits: list[tuple[int, int]],
    uid: int | None,
    pass_fds: tuple[int, ...] = (),
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session with ``rlimits`` set between fork and exec.

    Its stdout and stderr are pipes; its stdin is a pipe when ``with_stdin``, else
    ``/dev/null``. With ``uid`` it runs as that user (and group) with no extra groups.

    Raises:
        FileNotFoundError: the program (or the wrapper) is not there.
    """
    setrlimit = resource.setrlimit

    def in_child() -> None:  # runs between fork and exec: no imports, no locks
        for which, value in rlimits:
            with contextlib.suppress(ValueError, OSError):
                setrlimit(which, (value, value))

    return subprocess.Popen(
        argv,
        pass_fds=pass_fds,
        stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
        preexec_fn=in_child,
        user=uid,
        group=uid,
        extra_groups=[] if uid is not None else None,
        close_fds=True,
    )


def read_child_pid(fd: int) -> int | None:
    """The ``child-pid`` from bwrap's ``--info-fd`` JSON (closes ``fd``)."""
    data = b""
    try:
        end = time.monotonic() + 10.0
        while time.monotonic() < end:
            ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
            if b"}" in data:
                break
    finally:
        os.close(fd)
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None


class Killer:
    """Kills what a run started, in an order that leaves no zombie behind.

    With bwrap and unshare the wrapper's child is the init of a new pid namespace: it is
    killed first (the kernel then kills everything in the namespace) and the wrapper,
    still alive, reaps it and exits; only then is the whole process group killed. Killing
    the wrapper first would orphan its child to the host's init, which may not reap it.
    At the rlimits level the process group is killed at once.

    Args:
        pid: the run's process (the wrapper, or the command itself at rlimits).
        level: the isolation level.
        ns_init: the namespace init's pid and start time, as bwrap named it.
        kill: kill now (a timeout); ``False`` only reaps what the finished command left.
    """

    def __init__(
        self, pid: int, level: str, ns_init: tuple[int, str | None] | None, *, kill: bool
    ) -> None:
        self.pid = pid
        self.started = time.monotonic()
        self.group_killed = False
        self.waiting: list[int] = []
        if level in ("bwrap", "unshare"):
            # bwrap names its namespace init (which may outlive the wrapper for a moment);
            # unshare's init is its only child
            if ns_init is not None:
                init_pid, started = ns_init
                if started is None or process_start_ticks(init_pid) == started:
                    self.waiting.append(init_pid)  # still ours, not a reused pid
            else:
                self.waiting.extend(_children(pid))
            if kill:
                for child in self.waiting:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(child, signal.SIGKILL)
        else:
            self._kill_group()

    def _kill_group(self) -> None:
        self.group_killed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def step(self) -> None:
        """Kill the process group once the wrapper has exited (or after a second)."""
        if not self.group_killed and (exited(self.pid) or time.monotonic() - self.started > 1.0):
            self._kill_group()

    def gave_up(self) -> bool:
        """Whether it is time to stop waiting for the output to end."""
        return time.monotonic() - self.started > 6.0

    def finish(self) -> None:
        """Make sure the wrapper is dead (the caller's ``wait`` reaps it) and that every
        namespace init killed here has finished exiting, which is when the kernel has
        killed the rest of its namespace."""
        end = time.monotonic() + 2.0
        while not self.group_killed and not exited(self.pid) and time.monotonic() < end:
            time.sleep(0.005)
        if not self.group_killed:
            self._kill_group()
        for child in self.waiting:
            while not _dead(child) and time.monotonic() < end:
                time.sleep(0.005)


def exited(pid: int) -> bool:
    """Whether child ``pid`` has exited, without reaping it (its group id stays reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _dead(pid: int) -> bool:
    """Whether ``pid`` has finished exiting (gone, or a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return True
    return text[text.rfind(")") + 2 :][:1] in ("Z", "X", "")


def _children(pid: int) -> list[int]:
    """Direct children of ``pid``."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        pass
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat_line = f.read().decode("ascii", "replace")
            except OSError:
                continue
            fields = stat_line[stat_line.rfind(")") + 2 :].split()
            if len(fields) > 1 and int(fields[1]) == pid:
                kids.append(int(entry))
    return kids
