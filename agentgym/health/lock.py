"""One run per run folder: an exclusive lock on ``<run.output_dir>/run.lock``.

Two trainers writing one run folder write ``metrics.jsonl`` twice and overwrite each
other's checkpoints. The lock is an ``fcntl.flock`` on ``run.lock``, held by the process
that runs the training (the ``agentgym train --nproc N`` launcher for a multi-process
run, the trainer itself otherwise): the kernel releases it when that process ends, however
it ends (kill -9 included), so there is never a stale lock to delete by hand. The file
also holds the owner's pid, host, start time and command, for the refusal message.

Within one process the lock is re-entrant (a test, or a script, may build a second
trainer on the same folder after the first): it guards against other processes.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from agentgym import ConfigError

LOCK_FILE = "run.lock"
#: set by the launcher for its ranks: the pid that holds the run folder's lock for them
LAUNCHER_ENV = "AGENTGYM_LAUNCHER_PID"


class RunLockedError(ConfigError):
    """The run folder is in use by another trainer (the message says by whom)."""


_held: dict[str, tuple[int, int]] = {}  # resolved path -> (fd, holders in this process)
_held_lock = threading.Lock()


class RunLock:
    """The lock of one run folder; :meth:`acquire` it, :meth:`release` it (or use it as a
    context manager). See the module docstring."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._key = str(self.path.resolve()) if self.run_dir.exists() else str(self.path)
        self.held = False

    def acquire(self, *, role: str = "agentgym train") -> RunLock:
        """Take the lock or raise :class:`RunLockedError` naming the holder.

        Args:
            role: what holds it, written into the file (``agentgym train --nproc 2``).
        """
        if self.held:
            return self
        import fcntl

        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._key = str(self.path.resolve())
        with _held_lock:
            if self._key in _held:
                fd, n = _held[self._key]
                _held[self._key] = (fd, n + 1)
                self.held = True
                return self
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise RunLockedError(self._refusal()) from None
            owner = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                "role": role,
                "command": " ".join(sys.argv),
            }
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(owner) + "\n").encode(), 0)
            _held[self._key] = (fd, 1)
        self.held = True
        return self

    def release(self) -> None:
        """Give the lock back (the file stays; only the kernel lock matters)."""
        if not self.held:
            return
        self.held = False
        with _held_lock:
            fd, n = _held.get(self._key, (-1, 0))
            if n > 1:
                _held[self._key] = (fd, n - 1)
                return
            _held.pop(self._key, None)
        if fd >= 0:
            os.close(fd)  # closing the descriptor drops the flock

    def _refusal(self) -> str:
        owner = read_owner(self.path)
        who = (
            f"pid {owner.get('pid', '?')} on host {owner.get('host', '?')} "
            f"({owner.get('role', 'a trainer')}, started {owner.get('started', '?')})"
            if owner
            else "another process"
        )
        here = socket.gethostname()
        stop = (
            f"stop it (`kill {owner['pid']}`)"
            if owner.get("host") == here and owner.get("pid")
            else f"stop it on {owner.get('host', 'its host')}"
        )
        return (
            f"The run folder {self.run_dir} is in use by {who}. Two trainers in one folder "
            f"would overwrite each other's metrics and checkpoints. Wait for that run to "
            f"end, {stop}, or choose another folder with run.output_dir=..."
        )

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def read_owner(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What a lock file says about its holder (empty when unreadable)."""
    try:
        return dict(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return {}


def held_by_launcher(run_dir: str | os.PathLike[str]) -> bool:
    """Whether this process's launcher (``$AGENTGYM_LAUNCHER_PID``) holds the run's lock
    for it, so that a rank does not take it again."""
    pid = os.environ.get(LAUNCHER_ENV)
    if not pid or not pid.isdigit():
        return False
    return str(read_owner(Path(run_dir) / LOCK_FILE).get("pid")) == pid
