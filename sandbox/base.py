"""The sandbox protocol: :class:`Sandbox` (one template ``run`` for every backend) and its results.

A sandbox is a private workspace directory plus a way to run commands in it. Environments
write the agent's files into it, run tests or programs, and read results back. Everything
an agent writes is untrusted, so the backends bound what a command may do (time, memory,
processes, output, files) and these rules are the same for every backend:

* Paths are relative to the workspace, written with ``/``. Absolute paths, ``..`` parts
  and symlinks that resolve outside the workspace are refused with
  :class:`SandboxPathError`, when writing and when reading.
* ``run`` always returns an :class:`ExecResult`, whatever the command did: a crash, a
  timeout or an out-of-memory kill is a result, not an exception. Exceptions mean the
  sandbox itself failed (engine gone, sandbox closed) or the caller asked for something
  invalid.
* Output is capped per stream; the excess is read and thrown away, never held in memory.
* Backends that can (``supports_users``: Docker) run a command as another uid
  (``run(..., user="0:0")``), so that one sandbox can hold two parties that cannot read
  each other's private files or signal each other's processes, and start a command in the
  background (:meth:`Sandbox.start`). Every process of every user is killed, and every
  file removed, when the sandbox is reset.

:class:`Sandbox` checks every input once (command, timeout, stdin, env, cwd, paths,
file content), serialises calls, caps the output and builds the result; a backend
implements only what differs: :meth:`Sandbox._exec` (start the command, feed its stdin,
stream its output into the buffers it is given, kill it at the deadline),
``_write_files``, ``_read_bytes``, ``list_files``, ``close`` and ``reset``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym import SandboxError
from agentgym.sandbox.capture import CappedBuffer
from agentgym.sandbox.inputs import check_relative_path, command_argv, env_strings, to_bytes
from agentgym.sandbox.limits import SandboxLimits, is_number

__all__ = ["ExecResult", "ExecStatus", "Sandbox"]


@dataclass(frozen=True)
class ExecResult:
    """What one :meth:`Sandbox.run` did.

    Attributes:
        exit_code: the command's exit status. A command killed by signal N reports
            ``128 + N`` (so a timeout or an out-of-memory kill reads 137), as shells do.
        stdout: captured standard output, decoded as UTF-8 (bad bytes replaced), at most
            the sandbox's ``output_limit`` bytes.
        stderr: the same for standard error.
        timed_out: the command ran past its timeout and everything it started was killed.
        duration: wall-clock seconds from start to the end of the output.
        stdout_truncated: stdout produced more than the cap; the rest was discarded.
        stderr_truncated: the same for stderr.
        oom_killed: the kernel killed a process of this command for exceeding the memory
            limit (checked when a run fails without timing out, so a child killed under a
            parent that then exits 0 is not reported). Only the Docker backend can tell
            (it reads the container's memory cgroup); the local backend reports
            allocation failures through the command's own error output instead, and this
            stays ``False``.
    """

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    duration: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    oom_killed: bool = False

    @property
    def truncated(self) -> bool:
        """Whether either stream was cut at the output cap."""
        return self.stdout_truncated or self.stderr_truncated

    @property
    def ok(self) -> bool:
        """Exit code 0 and no timeout."""
        return self.exit_code == 0 and not self.timed_out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ExecStatus:
    """How a backend's :meth:`Sandbox._exec` ended; :meth:`Sandbox.run` adds the output.

    Attributes:
        exit_code: shell-style exit status (``128 + N`` for a death by signal N).
        duration: wall-clock seconds the command took.
        timed_out: the command ran past its timeout and was killed.
        oom_killed: the backend saw the kernel kill a process for lack of memory.
    """

    exit_code: int
    duration: float = 0.0
    timed_out: bool = False
    oom_killed: bool = False


class Sandbox(ABC):
    """A private workspace where untrusted commands run under limits.

    Use it as a context manager so it is always closed::

        with open_sandbox() as sb:
            sb.write_files({"main.py": "print(6 * 7)"})
            result = sb.run("python3 main.py", timeout=10)
            assert result.stdout == "42\\n"

    One sandbox runs one command at a time (calls from several threads are serialised).
    Blocking methods have ``*_async`` twins that run them in a worker thread.

    Attributes:
        backend: ``"docker"`` or ``"local"``.
        isolation: what isolates it: ``"docker"``, or the local level (``"bwrap"``,
            ``"unshare"``, ``"rlimits"``).
        limits: the :class:`SandboxLimits` in force.
    """

    backend: str = ""
    isolation: str = ""
    #: whether ``run(user=...)`` and :meth:`start` work (the backend has real uids)
    supports_users: bool = False

    def __init__(self, limits: SandboxLimits) -> None:
        self.limits = limits
        self._lock = threading.RLock()
        self._closed = False
        #: why the sandbox can no longer be used (set by a backend), or None
        self._broken: str | None = None

    # -- the protocol: what every caller uses ---------------------------------------------
    def run(
        self,
        cmd: str | Sequence[str],
        timeout: float | None = None,
        stdin: str | bytes | None = None,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run a command in the workspace and wait for it.

        Args:
            cmd: a shell command (run with ``sh -c``) or an argv list.
            timeout: seconds before everything the command started is killed
                (default: ``limits.timeout``).
            stdin: bytes or text fed to the command's standard input, then closed.
                ``None`` gives it an empty standard input.
            env: extra environment variables.
            cwd: working directory relative to the workspace (default: its root).
            user: ``"uid:gid"`` to run as instead of ``limits.user`` (only where
                ``supports_users``; in Docker, ``"0:0"`` is a root without capabilities
                other than ``CAP_DAC_OVERRIDE``: it reads and changes every file).

        Returns:
            The :class:`ExecResult`; never raises for anything the command did.

        Raises:
            SandboxError: the sandbox is closed or broken, or an argument is invalid.
            agentgym.InfraError: the sandbox died under the command (its container was
                killed or removed, the engine went away): not the command's doing.
        """
        argv = command_argv(cmd)
        seconds = self._timeout(timeout)
        extra_env = env_strings(env)
        workdir = None if cwd is None else check_relative_path(cwd)
        data = None if stdin is None else to_bytes(stdin, "stdin")
        as_user = self._user(user)
        stdout = CappedBuffer(self.limits.output_limit)
        stderr = CappedBuffer(self.limits.output_limit)
        with self._lock:
            self._check_usable()
            status = self._exec(
                argv,
                timeout=seconds,
                stdin=data,
                env=extra_env,
                cwd=workdir,
                stdout=stdout,
                stderr=stderr,
                **({"user": as_user} if as_user else {}),
            )
        return ExecResult(
            exit_code=status.exit_code,
            stdout=stdout.text(),
            stderr=stderr.text(),
            timed_out=status.timed_out,
            duration=status.duration,
            stdout_truncated=stdout.truncated,
            stderr_truncated=stderr.truncated,
            oom_killed=status.oom_killed,
        )

    def start(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
    ) -> None:
        """Start a command in the background and return at once (only where
        ``supports_users``).

        Its output is discarded; it is killed with everything it started at ``timeout``,
        or earlier by :meth:`reset` (the next holder never sees it). Arguments as for
        :meth:`run`.

        Raises:
            SandboxError: the backend cannot, the sandbox is closed, or an argument is bad.
        """
        argv = command_argv(cmd)
        seconds = self._timeout(timeout)
        extra_env = env_strings(env)
        workdir = None if cwd is None else check_relative_path(cwd)
        as_user = self._user(user)
        if not self.supports_users:
            raise SandboxError(
                f"The {self.backend} backend cannot start background commands; use the "
                "docker backend."
            )
        with self._lock:
            self._check_usable()
            self._start(argv, timeout=seconds, env=extra_env, cwd=workdir, user=as_user)

    def write_files(self, files: Mapping[str, str | bytes]) -> None:
        """Write files into the workspace, creating parent directories.

        Args:
            files: relative path -> content (``str`` is written as UTF-8).

        Raises:
            SandboxPathError: a path is invalid or leads outside the workspace; then no
                file of the call is written.
        """
        entries = [
            (check_relative_path(path), to_bytes(content, path)) for path, content in files.items()
        ]
        self._write_files(entries)

    def read_bytes(self, path: str) -> bytes:
        """The content of a workspace file.

        Raises:
            SandboxPathError: the path is invalid or leads outside the workspace.
            FileNotFoundError: there is no regular file at ``path``.
            SandboxError: the file is larger than ``limits.max_read_bytes``.
        """
        return self._read_bytes(check_relative_path(path))

    def read_file(self, path: str) -> str:
        """The content of a workspace file as text (UTF-8, bad bytes replaced)."""
        return self.read_bytes(path).decode("utf-8", errors="replace")

    @abstractmethod
    def list_files(self) -> list[str]:
        """Relative paths of every regular file in the workspace, sorted.

        Symlinks are not followed and not listed.
        """

    @abstractmethod
    def close(self) -> None:
        """Release everything the sandbox holds. Idempotent."""

    # -- what a backend implements ----------------------------------------------------------
    @abstractmethod
    def _exec(
        self,
        argv: list[str],
        *,
        timeout: float,
        stdin: bytes | None,
        env: dict[str, str],
        cwd: str | None,
        stdout: CappedBuffer,
        stderr: CappedBuffer,
    ) -> ExecStatus:
        """Run ``argv`` in the workspace; called with every input checked, under the lock.

        Args:
            argv: the command (a shell string is already ``["sh", "-c", ...]``).
            timeout: seconds (> 0) before everything the command started is killed.
            stdin: bytes to feed, then close; ``None`` for an empty standard input.
            env: extra environment variables (checked strings).
            cwd: working directory in normal form relative to the workspace, or ``None``
                for its root. A directory that is not there is the command's failure
                (exit code 2 and a line on stderr), not an exception.
            stdout: where the command's standard output goes (it caps itself).
            stderr: the same for standard error.

        Backends with ``supports_users`` also receive ``user`` (``"uid:gid"``) when the
        caller asked for another user than ``limits.user``.
        """

    def _start(
        self,
        argv: list[str],
        *,
        timeout: float,
        env: dict[str, str],
        cwd: str | None,
        user: str | None,
    ) -> None:
        """Start ``argv`` detached (backends with ``supports_users`` implement this)."""
        raise SandboxError(f"The {self.backend} backend cannot start background commands.")

    @abstractmethod
    def _write_files(self, entries: list[tuple[str, bytes]]) -> None:
        """Write ``(normal relative path, content)`` pairs; refuse them all if one is bad."""

    @abstractmethod
    def _read_bytes(self, rel: str) -> bytes:
        """The content of the file at ``rel`` (a normal relative path)."""

    # -- pool support ---------------------------------------------------------------------
    def reset(self) -> None:
        """Make the sandbox fresh for a new user: no files, no leftover processes.

        Backends may do the work lazily, as long as nothing of the previous user can be
        observed by any later call.
        """
        raise NotImplementedError

    def healthy(self) -> bool:
        """Whether the sandbox can still be used (cheap check, no command run)."""
        return not self._closed

    @property
    def broken(self) -> bool:
        """Whether the sandbox found itself unusable (it must be closed and replaced)."""
        return self._broken is not None

    # -- conveniences -----------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def describe(self) -> str:
        """One line that says what this sandbox is (backend, isolation, limits)."""
        lim = self.limits
        return (
            f"{self.backend} sandbox ({self.isolation}); memory {lim.memory_mb} MiB, "
            f"pids {lim.pids}, network {'on' if lim.network else 'off'}"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("This sandbox is closed; open a new one with open_sandbox().")

    def _check_usable(self) -> None:
        """Raise unless the sandbox is open and not broken."""
        self._check_open()
        if self._broken:
            raise SandboxError(
                f"This sandbox is broken ({self._broken}); close it and open a new one "
                "(a SandboxPool replaces broken sandboxes by itself)."
            )

    def _user(self, user: str | None) -> str | None:
        """``user`` checked (``"uid:gid"``), or None for ``limits.user``."""
        if user is None or user == self.limits.user:
            return None
        if not self.supports_users:
            raise SandboxError(
                f"The {self.backend} backend runs every command as its one user; "
                "user= needs the docker backend."
            )
        uid, sep, gid = str(user).partition(":")
        if not (sep and uid.isdigit() and gid.isdigit()):
            raise SandboxError(f"user must be 'uid:gid' (numbers), got {user!r}.")
        return f"{int(uid)}:{int(gid)}"

    def _timeout(self, timeout: float | None) -> float:
        t = self.limits.timeout if timeout is None else timeout
        if not is_number(t) or t <= 0:
            raise SandboxError(f"timeout must be a number of seconds > 0, got {timeout!r}.")
        return float(t)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def run_async(self, cmd: str | Sequence[str], **kwargs: Any) -> ExecResult:
        """:meth:`run` in a worker thread."""
        return await asyncio.to_thread(self.run, cmd, **kwargs)

    async def write_files_async(self, files: Mapping[str, str | bytes]) -> None:
        """:meth:`write_files` in a worker thread."""
        await asyncio.to_thread(self.write_files, files)

    async def read_file_async(self, path: str) -> str:
        """:meth:`read_file` in a worker thread."""
        return await asyncio.to_thread(self.read_file, path)

    async def list_files_async(self) -> list[str]:
        """:meth:`list_files` in a worker thread."""
        return await asyncio.to_thread(self.list_files)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {self.isolation} {state}>"
