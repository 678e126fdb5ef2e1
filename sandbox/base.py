"""What every sandbox backend shares: the protocol, results, limits and path rules.

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
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym import ConfigError, SandboxError, did_you_mean

__all__ = [
    "DEFAULT_OUTPUT_LIMIT",
    "CappedBuffer",
    "ExecResult",
    "Sandbox",
    "SandboxLimits",
    "SandboxPathError",
    "SandboxUnavailableError",
    "check_relative_path",
    "command_argv",
    "exit_code_from_status",
]

#: Default cap on captured bytes per output stream (stdout and stderr each).
DEFAULT_OUTPUT_LIMIT = 64 * 1024


class SandboxPathError(SandboxError, ValueError):
    """A path given to a sandbox is absolute, escapes the workspace, or is malformed."""


class SandboxUnavailableError(SandboxError):
    """A backend cannot be used here (no engine, no image, missing tools); says how to fix."""


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
class SandboxLimits:
    """Resource and security limits of one sandbox. Every default is safe to use.

    Attributes:
        timeout: default seconds a :meth:`Sandbox.run` may take before everything it
            started is killed.
        output_limit: bytes kept per output stream of one run.
        memory_mb: memory limit in MiB (Docker: the container's memory cgroup, swap
            included, tmpfs pages count against it; local: address space per process).
        cpus: CPU share (Docker: ``nano_cpus``; ignored by the local backend).
        pids: most processes and threads at once (Docker: pids cgroup; local:
            ``RLIMIT_NPROC`` on top of what the sandbox user already runs).
        workspace_mb: size of the writable workspace (Docker: tmpfs size; local:
            largest single file, ``RLIMIT_FSIZE``, since a directory cannot be bounded).
        tmp_mb: size of ``/tmp`` (Docker tmpfs); ignored by the local backend.
        cpu_seconds: CPU seconds per process (local ``RLIMIT_CPU``); ``None`` means the
            run's timeout plus a margin.
        nofile: most open files per process.
        network: give the sandbox a network. ``False`` (the default) leaves it only a
            loopback interface of its own.
        user: ``uid:gid`` that commands run as inside a Docker container.
        read_only_root: mount the container's root filesystem read-only.
        max_read_bytes: largest file :meth:`Sandbox.read_file` returns.
    """

    timeout: float = 30.0
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    memory_mb: int = 512
    cpus: float = 1.0
    pids: int = 128
    workspace_mb: int = 256
    tmp_mb: int = 64
    cpu_seconds: int | None = None
    nofile: int = 1024
    network: bool = False
    user: str = "1000:1000"
    read_only_root: bool = True
    max_read_bytes: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        def need(name: str, ok: bool, what: str) -> None:
            if not ok:
                raise ConfigError(
                    f"sandbox limit {name}={getattr(self, name)!r} is invalid: it must be {what}."
                )

        need("timeout", _number(self.timeout) and self.timeout > 0, "a number of seconds > 0")
        need(
            "output_limit",
            _integer(self.output_limit) and self.output_limit >= 1,
            "an integer number of bytes >= 1",
        )
        need("memory_mb", _integer(self.memory_mb) and self.memory_mb >= 16, "an integer >= 16")
        need("cpus", _number(self.cpus) and self.cpus > 0, "a number > 0 (e.g. 0.5 or 2)")
        need("pids", _integer(self.pids) and self.pids >= 8, "an integer >= 8")
        need(
            "workspace_mb",
            _integer(self.workspace_mb) and self.workspace_mb >= 1,
            "an integer >= 1",
        )
        need("tmp_mb", _integer(self.tmp_mb) and self.tmp_mb >= 1, "an integer >= 1")
        need(
            "cpu_seconds",
            self.cpu_seconds is None or (_integer(self.cpu_seconds) and self.cpu_seconds >= 1),
            "None or an integer >= 1",
        )
        need("nofile", _integer(self.nofile) and self.nofile >= 16, "an integer >= 16")
        need("network", isinstance(self.network, bool), "True or False")
        need("read_only_root", isinstance(self.read_only_root, bool), "True or False")
        need(
            "max_read_bytes",
            _integer(self.max_read_bytes) and self.max_read_bytes >= 1,
            "an integer >= 1",
        )
        parts = self.user.split(":") if isinstance(self.user, str) else []
        need(
            "user",
            len(parts) == 2 and all(p.isdigit() for p in parts) and parts[0] != "0",
            "a numeric non-root 'uid:gid' such as '1000:1000'",
        )

    @classmethod
    def from_kwargs(cls, base: SandboxLimits | None = None, **overrides: Any) -> SandboxLimits:
        """``base`` (or the defaults) with ``overrides`` applied; unknown names are refused."""
        known = {f.name for f in dataclasses.fields(cls)}
        for name in overrides:
            if name not in known:
                raise ConfigError(
                    f"Unknown sandbox limit {name!r}.{did_you_mean(name, known)} "
                    f"Known limits: {', '.join(sorted(known))}."
                )
        return dataclasses.replace(base or cls(), **overrides)


def _number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _integer(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_relative_path(path: str) -> str:
    """Validate a workspace path and return its normal form (``a/b.txt``).

    This is the syntactic half of the path rules; backends also resolve symlinks inside
    the workspace and refuse those that lead out.

    Raises:
        SandboxPathError: the path is empty, absolute, contains ``..`` or a NUL byte.
    """
    if not isinstance(path, str):
        raise SandboxPathError(
            f"Sandbox paths are strings relative to the workspace, got {type(path).__name__}."
        )
    if not path or path.strip() == "":
        raise SandboxPathError("Empty sandbox path; give a path relative to the workspace.")
    if "\x00" in path:
        raise SandboxPathError(f"Sandbox path {path!r} contains a NUL byte.")
    if path.startswith("/"):
        raise SandboxPathError(
            f"Sandbox path {path!r} is absolute; paths are relative to the workspace, "
            f"e.g. {path.lstrip('/') or 'main.py'!r}."
        )
    parts = path.split("/")
    if ".." in parts:
        raise SandboxPathError(
            f"Sandbox path {path!r} contains '..'; it may not leave the workspace. "
            "Write paths relative to the workspace root without '..'."
        )
    norm = "/".join(p for p in parts if p not in ("", "."))
    if not norm:
        raise SandboxPathError(
            f"Sandbox path {path!r} names the workspace itself; name a file inside it."
        )
    return norm


def command_argv(cmd: str | Sequence[str]) -> list[str]:
    """The argv for ``cmd``: a string runs through ``sh -c``, a sequence runs as is."""
    if isinstance(cmd, str):
        if not cmd.strip():
            raise SandboxError("Empty command; pass a shell command string or an argv list.")
        return ["sh", "-c", cmd]
    argv = list(cmd)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise SandboxError("A command list must be a non-empty list of strings (an argv).")
    if any("\x00" in a for a in argv):
        raise SandboxError("Command arguments may not contain NUL bytes.")
    return argv


def exit_code_from_status(returncode: int) -> int:
    """Shell-style exit code: a death by signal N (Python's ``-N``) becomes ``128 + N``."""
    return 128 - returncode if returncode < 0 else returncode


class CappedBuffer:
    """Collects up to ``limit`` bytes of a stream, counts and discards the rest."""

    __slots__ = ("_chunks", "kept", "limit", "total")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept = 0
        self.total = 0
        self._chunks: list[bytes] = []

    def feed(self, data: bytes) -> None:
        """Add ``data``; bytes past the limit are only counted."""
        self.total += len(data)
        room = self.limit - self.kept
        if room > 0:
            piece = data[:room]
            self._chunks.append(piece)
            self.kept += len(piece)

    @property
    def truncated(self) -> bool:
        """Whether more bytes arrived than were kept."""
        return self.total > self.kept

    def getvalue(self) -> bytes:
        """The kept bytes."""
        return b"".join(self._chunks)

    def text(self) -> str:
        """The kept bytes as text (UTF-8, bad bytes replaced)."""
        return self.getvalue().decode("utf-8", errors="replace")


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

    def __init__(self, limits: SandboxLimits) -> None:
        self.limits = limits
        self._lock = threading.RLock()
        self._closed = False

    # -- the protocol -------------------------------------------------------------------
    @abstractmethod
    def write_files(self, files: Mapping[str, str | bytes]) -> None:
        """Write files into the workspace, creating parent directories.

        Args:
            files: relative path -> content (``str`` is written as UTF-8).

        Raises:
            SandboxPathError: a path is invalid or leads outside the workspace; then no
                file of the call is written.
        """

    @abstractmethod
    def read_bytes(self, path: str) -> bytes:
        """The content of a workspace file.

        Raises:
            SandboxPathError: the path is invalid or leads outside the workspace.
            FileNotFoundError: there is no regular file at ``path``.
            SandboxError: the file is larger than ``limits.max_read_bytes``.
        """

    def read_file(self, path: str) -> str:
        """The content of a workspace file as text (UTF-8, bad bytes replaced)."""
        return self.read_bytes(path).decode("utf-8", errors="replace")

    @abstractmethod
    def list_files(self) -> list[str]:
        """Relative paths of every regular file in the workspace, sorted.

        Symlinks are not followed and not listed.
        """

    @abstractmethod
    def run(
        self,
        cmd: str | Sequence[str],
        timeout: float | None = None,
        stdin: str | bytes | None = None,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
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

        Returns:
            The :class:`ExecResult`; never raises for anything the command did.
        """

    @abstractmethod
    def close(self) -> None:
        """Release everything the sandbox holds. Idempotent."""

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
        return False

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

    def _timeout(self, timeout: float | None) -> float:
        t = self.limits.timeout if timeout is None else timeout
        if not _number(t) or t <= 0:
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


def signal_name(code: int) -> str | None:
    """``'SIGKILL'`` for exit code 137 and so on; ``None`` when not a signal death."""
    if code <= 128 or code >= 128 + 65:
        return None
    try:
        return signal.Signals(code - 128).name
    except ValueError:
        return None


def env_strings(env: Mapping[str, str] | None) -> dict[str, str]:
    """Validate an ``env`` mapping (string keys and values, no ``=`` in keys)."""
    out: dict[str, str] = {}
    for k, v in (env or {}).items():
        if not isinstance(k, str) or not isinstance(v, str) or not k or "=" in k:
            raise SandboxError(f"env must map variable names to strings; bad entry {k!r}: {v!r}.")
        if "\x00" in k or "\x00" in v:
            raise SandboxError(f"env entry {k!r} contains a NUL byte.")
        out[k] = v
    return out


def to_bytes(content: str | bytes, path: str) -> bytes:
    """File content as bytes; ``str`` is encoded as UTF-8."""
    if isinstance(content, str):
        return content.encode("utf-8")
    if isinstance(content, bytes | bytearray | memoryview):
        return bytes(content)
    raise SandboxError(f"Content for {path!r} must be str or bytes, got {type(content).__name__}.")


def owner_alive(pid: int, start_ticks: str | None = None) -> bool:
    """Whether process ``pid`` on this host is alive (and started at ``start_ticks``)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if start_ticks:
        now = process_start_ticks(pid)
        if now is not None and now != start_ticks:
            return False  # the pid was reused by another process
    return True


def process_start_ticks(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (``/proc/PID/stat``), if readable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    rest = data[data.rfind(")") + 2 :].split()
    return rest[19] if len(rest) > 19 else None
