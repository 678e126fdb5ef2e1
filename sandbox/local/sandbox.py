"""The local sandbox class, :class:`LocalSandbox`: a temporary workspace on this machine,
run at the strongest isolation level that works here."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time

from agentgym import ConfigError, SandboxError
from agentgym.sandbox.base import ExecStatus, Sandbox
from agentgym.sandbox.capture import CappedBuffer, exit_code_from_status
from agentgym.sandbox.errors import SandboxPathError, SandboxUnavailableError
from agentgym.sandbox.limits import SandboxLimits
from agentgym.sandbox.local.levels import (
    INNER_WORKSPACE,
    LEVELS,
    best_level,
    drop_uid,
    nproc_helper,
    probe,
    wrapper_argv,
)
from agentgym.sandbox.local.process import read_child_pid, rlimits_for, start_process
from agentgym.sandbox.local.streaming import pump
from agentgym.sandbox.procfs import process_start_ticks

__all__ = ["LocalSandbox"]

_SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


class LocalSandbox(Sandbox):
    """A sandbox in a temporary directory (see :mod:`agentgym.sandbox.local` for each level).

    Args:
        limits: resource limits (default :class:`SandboxLimits`); ``cpus`` and
            ``tmp_mb`` are not enforced here.
        level: ``"bwrap"``, ``"unshare"`` or ``"rlimits"``; ``None`` picks the strongest
            that works on this machine.

    Raises:
        SandboxUnavailableError: the requested level does not work here (says why).
    """

    backend = "local"

    def __init__(self, limits: SandboxLimits | None = None, *, level: str | None = None) -> None:
        super().__init__(limits or SandboxLimits())
        if level is None:
            level = best_level()
        elif level not in LEVELS:
            raise ConfigError(f"Unknown local sandbox level {level!r}; choose one of {LEVELS}.")
        else:
            why = probe(level)
            if why is not None:
                raise SandboxUnavailableError(
                    f"Local sandbox level {level!r} is not available: {why}. "
                    f"Pick another level or leave level=None (best here: {best_level()!r})."
                )
        self.isolation = level
        self._uid = drop_uid()
        self._root = tempfile.mkdtemp(prefix="agentgym-sandbox-")
        self.workspace = os.path.join(self._root, "workspace")
        self._tmp = os.path.join(self._root, "tmp")
        os.mkdir(self.workspace, 0o755)
        os.mkdir(self._tmp, 0o700)
        if self._uid is not None:
            os.chmod(self._root, 0o711)
            for path in (self.workspace, self._tmp):
                os.chown(path, self._uid, self._uid)

    # -- the backend's part of the protocol ------------------------------------------------
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
        # where the workspace and tmp appear to the command
        inner = INNER_WORKSPACE if self.isolation == "bwrap" else self.workspace
        tmp_inner = "/tmp" if self.isolation == "bwrap" else self._tmp
        host_cwd, inner_cwd = self.workspace, inner
        if cwd is not None:
            host_cwd = os.path.realpath(os.path.join(self.workspace, cwd))
            if not (_inside(host_cwd, self.workspace) and os.path.isdir(host_cwd)):
                stderr.feed(f"agentgym-sandbox: no directory {cwd} in the workspace\n".encode())
                return ExecStatus(exit_code=2)
            inner_cwd = inner + host_cwd[len(self.workspace) :]
        environment = {
            "PATH": _SYSTEM_PATH,
            "HOME": inner,
            "TMPDIR": tmp_inner,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            **env,
        }
        return self._spawn(
            argv,
            inner=inner,
            inner_cwd=inner_cwd,
            host_cwd=host_cwd,
            seconds=timeout,
            stdin=stdin,
            env=environment,
            out=stdout,
            err=stderr,
        )

    def _spawn(
        self,
        argv: list[str],
        *,
        inner: str,
        inner_cwd: str,
        host_cwd: str,
        seconds: float,
        stdin: bytes | None,
        env: dict[str, str],
        out: CappedBuffer,
        err: CappedBuffer,
    ) -> ExecStatus:
        """Start ``argv`` inside the level's wrapper and stream it to the end."""
        # in a user namespace the process limit counts the namespace's tasks only: the
        # command's own, plus the namespace's init
        inside = self.isolation != "rlimits" and nproc_helper() is not None
        limits = rlimits_for(
            self.limits,
            seconds,
            self._uid if self._uid is not None else os.getuid(),
            nproc_inside=inside,
        )
        # bwrap reports the pid of its namespace's init on this pipe
        info_r, info_w = os.pipe() if self.isolation == "bwrap" else (-1, -1)
        wrapper = wrapper_argv(
            self.isolation,
            self.workspace,
            self._tmp,
            inner,
            inner_cwd,
            info_fd=info_w if info_w >= 0 else None,
            nproc=self.limits.pids + 1 if inside else None,
        )
        start = time.monotonic()
        try:
            proc = start_process(
                [*wrapper, *argv],
                with_stdin=stdin is not None,
                cwd=host_cwd,
                env=env,
                rlimits=limits,
                uid=self._uid,
                pass_fds=(info_w,) if info_w >= 0 else (),
            )
        except FileNotFoundError as e:
            err.feed(f"agentgym-sandbox: command not found: {e.filename}\n".encode())
            if info_r >= 0:
                os.close(info_r)
            return ExecStatus(exit_code=127, duration=time.monotonic() - start)
        finally:
            if info_w >= 0:
                os.close(info_w)
        ns_init = None
        if info_r >= 0:
            init_pid = read_child_pid(info_r)
            if init_pid is not None:
                ns_init = (init_pid, process_start_ticks(init_pid))
        timed_out = pump(proc, stdin, out, err, start + seconds, self.isolation, ns_init)
        returncode = proc.wait()
        return ExecStatus(
            exit_code=137 if timed_out else exit_code_from_status(returncode),
            duration=time.monotonic() - start,
            timed_out=timed_out,
        )

    def _write_files(self, entries: list[tuple[str, bytes]]) -> None:
        with self._lock:
            self._check_open()
            plan = []
            for rel, blob in entries:
                real = self._resolve(rel)
                if os.path.isdir(real) or real == self.workspace:
                    raise SandboxPathError(f"Sandbox path {rel!r} is a directory, not a file.")
                plan.append((rel, real, blob))
            for rel, real, blob in plan:
                self._make_parents(os.path.dirname(real), rel)
                try:
                    fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
                except OSError as e:
                    raise SandboxError(
                        f"Writing {rel!r} in the sandbox failed: {e.strerror}."
                    ) from e
                with os.fdopen(fd, "wb") as f:
                    f.write(blob)
                if self._uid is not None:
                    os.chown(real, self._uid, self._uid)

    def _read_bytes(self, rel: str) -> bytes:
        with self._lock:
            self._check_open()
            real = self._resolve(rel)
            try:
                st = os.stat(real)
            except FileNotFoundError:
                raise FileNotFoundError(f"No file {rel!r} in the sandbox workspace.") from None
            if not stat.S_ISREG(st.st_mode):
                raise SandboxPathError(f"Sandbox path {rel!r} is a directory, not a file.")
            if st.st_size > self.limits.max_read_bytes:
                raise SandboxError(
                    f"Sandbox file {rel!r} has {st.st_size} bytes, more than "
                    f"limits.max_read_bytes={self.limits.max_read_bytes}; raise the limit."
                )
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                return f.read(self.limits.max_read_bytes + 1)

    def list_files(self) -> list[str]:
        with self._lock:
            self._check_open()
            out = []
            for d, _dirs, names in os.walk(self.workspace):
                for name in names:
                    p = os.path.join(d, name)
                    with contextlib.suppress(OSError):
                        if stat.S_ISREG(os.lstat(p).st_mode):
                            out.append(os.path.relpath(p, self.workspace))
            return sorted(out)

    def close(self) -> None:
        """Delete the workspace. Idempotent."""
        if self._closed:
            return
        self._closed = True
        _rmtree(self._root)

    def reset(self) -> None:
        """Empty the workspace and the private tmp and give them their modes back
        (commands leave no processes behind)."""
        with self._lock:
            self._check_open()
            for d, mode in ((self.workspace, 0o755), (self._tmp, 0o700)):
                os.chmod(d, mode)
                for entry in os.listdir(d):
                    _rmtree(os.path.join(d, entry))

    def healthy(self) -> bool:
        return not self._closed and os.path.isdir(self.workspace)

    def describe(self) -> str:
        return f"{super().describe()}; workspace {self.workspace}"

    # -- workspace files ----------------------------------------------------------------------
    def _resolve(self, rel: str) -> str:
        """The real path of ``rel``; refused when a symlink leads it out of the workspace."""
        real = os.path.realpath(os.path.join(self.workspace, rel))
        if not _inside(real, self.workspace):
            raise SandboxPathError(
                f"Sandbox path {rel!r} resolves to {real!r}, outside the workspace (through a "
                "symlink); only paths inside the workspace may be read or written."
            )
        return real

    def _make_parents(self, directory: str, rel: str) -> None:
        missing = []
        d = directory
        while not os.path.isdir(d):
            missing.append(d)
            d = os.path.dirname(d)
        for d in reversed(missing):
            try:
                os.mkdir(d, 0o755)
            except OSError as e:
                raise SandboxError(
                    f"Writing {rel!r} failed: cannot create {d!r}: {e.strerror}."
                ) from e
            if self._uid is not None:
                os.chown(d, self._uid, self._uid)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def _rmtree(path: str) -> None:
    """Delete a tree even where a command removed permissions from its own directories."""

    def fix(func, p, exc_info):  # type: ignore[no-untyped-def]
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
        with contextlib.suppress(OSError):
            func(p)

    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, onerror=fix)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)
    if os.path.lexists(path):
        with contextlib.suppress(OSError):
            shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path):
        raise SandboxError(f"Could not delete {path!r}; remove it by hand.")
