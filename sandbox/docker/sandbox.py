"""The Docker sandbox class: one long-lived, locked-down container per :class:`DockerSandbox`.

Isolation (defaults, each configurable through :class:`~agentgym.sandbox.SandboxLimits`):

* no network (``network_mode="none"``: the container has only its own loopback),
* every capability dropped, ``no-new-privileges``, Docker's default seccomp profile,
* read-only root filesystem; the only writable places are size-bounded tmpfs mounts:
  ``/workspace`` (the workspace), ``/tmp`` and Docker's ``/dev/shm``,
* memory (swap included), CPU and pids limits from the container's cgroups,
* commands run as a non-root user (``1000:1000``); the container's own processes (an init
  and an idle keeper) run as another user (``65534``), so nothing a command does can
  signal them and stop the container,
* an init process (Docker's ``init=True``) that reaps orphans.

How a command runs: each :meth:`DockerSandbox.run` is one ``docker exec`` of a small shell
wrapper that ``exec``\\ s ``timeout -s KILL T`` around the command. At the deadline
``timeout`` kills the command's whole process group with SIGKILL, from inside the
container, without starting a new process (this matters when a fork bomb has used every
pid). After any timeout the sandbox also kills every process of the sandbox user (``kill
-9 -1`` from one more exec) so that processes that left the process group die too. If
the output stream stays open past the deadline plus a grace period, that kill happens
from the host side.

Every container carries the labels ``agentgym.sandbox=1``, ``agentgym.owner_pid``,
``agentgym.owner_host``, ``agentgym.owner_start`` and ``agentgym.created``. Containers are
removed on :meth:`close`, at interpreter exit and on SIGTERM/SIGINT (handlers chain to
the previous ones); :func:`~agentgym.sandbox.docker.prune` removes those whose owner
process is gone (after a SIGKILL, for example).

What it does not do: it does not defend against kernel exploits (containers share the
host kernel; use gVisor or a VM for hostile workloads at scale), it does not limit disk
I/O bandwidth, and with ``network=True`` the container gets Docker's default bridge.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from agentgym import SandboxError
from agentgym.sandbox.base import ExecStatus, Sandbox
from agentgym.sandbox.capture import CappedBuffer
from agentgym.sandbox.docker.client import docker_client
from agentgym.sandbox.docker.containers import remove_container, start_container
from agentgym.sandbox.docker.image import default_image
from agentgym.sandbox.docker.scripts import (
    CLEANUP_FAILED,
    HELPER_TIMEOUT,
    KILL_ALL,
    READ_OOM,
    WORKSPACE,
    helper_argv,
    oom_kills,
    wrapped_argv,
)
from agentgym.sandbox.docker.streaming import ContainerGoneError, ExecEnd, stream_exec
from agentgym.sandbox.errors import SandboxPathError
from agentgym.sandbox.limits import SandboxLimits

log = logging.getLogger("agentgym.sandbox")

__all__ = ["DockerSandbox"]


class DockerSandbox(Sandbox):
    """A sandbox backed by one Docker container (see the module docstring for what it isolates).

    Args:
        limits: resource and security limits (default :class:`SandboxLimits`).
        image: image to run (default :func:`~agentgym.sandbox.docker.default_image`). It
            needs ``sh``, coreutils (``timeout``, ``sleep``, ``rm``) and ``python3``.
        name_prefix: containers are named ``<prefix>-<pid>-<random>``.

    Raises:
        SandboxUnavailableError: no engine, or the image is missing (says how to fix).
    """

    backend = "docker"
    isolation = "docker"

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        image: str | None = None,
        name_prefix: str = "agentgym-sb",
    ) -> None:
        super().__init__(limits or SandboxLimits())
        self.image = image if image is not None else default_image()
        self._name_prefix = name_prefix
        self._api = docker_client().api
        self.container_id: str = ""
        self.name: str = ""
        self._oom_seen = 0
        self._needs_clean = False
        self._start_container()

    # -- container lifecycle -----------------------------------------------------------
    def _start_container(self) -> None:
        self.container_id, self.name = start_container(
            self._api, self.image, self.limits, self._name_prefix
        )
        self._oom_seen = 0
        self._needs_clean = False
        self._broken = None

    def _remove_container(self) -> None:
        if self.container_id:
            remove_container(self._api, self.container_id)

    def replace_container(self) -> None:
        """Throw the container away and start a fresh one (workspace lost)."""
        with self._lock:
            self._check_open()
            self._remove_container()
            self._start_container()

    def close(self) -> None:
        """Remove the container. Idempotent; safe to call while a command runs."""
        if self._closed:
            return
        self._closed = True
        self._remove_container()

    def reset(self) -> None:
        """Mark the sandbox for cleaning: the next call kills every process and empties the
        writable places first, inside the same exec (so the pool adds no extra exec)."""
        self._check_open()
        self._needs_clean = True

    def healthy(self) -> bool:
        """Not closed, not broken, and the container is running."""
        if self._closed or self._broken:
            return False
        try:
            state = self._api.inspect_container(self.container_id)["State"]
        except Exception:
            return False
        return bool(state.get("Running")) and not state.get("Paused")

    def describe(self) -> str:
        return f"{super().describe()}; image {self.image}; container {self.name}"

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
        workdir = WORKSPACE if cwd is None else f"{WORKSPACE}/{cwd}"
        end = self._exec_wrapped(
            argv, timeout=timeout, stdin=stdin, env=env, workdir=workdir, out=stdout, err=stderr
        )
        if self._closed:
            raise SandboxError("The sandbox was closed while the command ran.")
        timed_out = end.host_killed or (end.exit_code == 137 and end.duration >= timeout)
        oom = False
        if timed_out:
            if not end.host_killed:
                self._kill_all()  # processes that left the process group
        elif end.exit_code != 0:
            oom = self._oom_increased()
        return ExecStatus(end.exit_code, end.duration, timed_out=timed_out, oom_killed=oom)

    def _write_files(self, entries: list[tuple[str, bytes]]) -> None:
        if not entries:
            return
        header = json.dumps([[rel, len(blob)] for rel, blob in entries]).encode()
        payload = header + b"\n" + b"".join(blob for _, blob in entries)
        self._helper(["write"], stdin=payload, out_limit=64 * 1024)

    def _read_bytes(self, rel: str) -> bytes:
        limit = self.limits.max_read_bytes
        return self._helper(["read", rel, str(limit)], out_limit=limit + 1)

    def list_files(self) -> list[str]:
        out = self._helper(["list"], out_limit=self.limits.max_read_bytes)
        return list(json.loads(out))

    # -- internals ----------------------------------------------------------------------------
    def _helper(self, args: list[str], *, stdin: bytes | None = None, out_limit: int) -> bytes:
        """Run the file helper with ``args``; its reply, or the error it reported raised."""
        out, err = CappedBuffer(out_limit), CappedBuffer(out_limit)
        with self._lock:
            self._check_usable()
            end = self._exec_wrapped(
                helper_argv(args),
                timeout=HELPER_TIMEOUT,
                stdin=stdin,
                env={},
                workdir=WORKSPACE,
                out=out,
                err=err,
            )
        if end.exit_code == 0:
            if out.truncated:
                raise SandboxError(
                    f"The reply to {args[0]!r} exceeded {out_limit} bytes; raise "
                    "limits.max_read_bytes to read larger files."
                )
            return out.getvalue()
        if end.exit_code == 3:
            _raise_helper_error(json.loads(out.text()), self.limits)
        hint = ""
        if end.exit_code == 127:
            hint = " The image needs python3 for file transfer."
        raise SandboxError(
            f"Sandbox file operation {args[0]!r} failed (exit {end.exit_code}): "
            f"{err.text().strip()[-500:]}{hint}"
        )

    def _exec_wrapped(
        self,
        argv: list[str],
        *,
        timeout: float,
        stdin: bytes | None,
        env: dict[str, str],
        workdir: str,
        out: CappedBuffer,
        err: CappedBuffer,
    ) -> ExecEnd:
        """Run ``argv`` inside the wrapper, cleaning up after the previous holder first when
        :meth:`reset` asked for it; a container that cannot be cleaned is replaced once."""
        for attempt in (0, 1):
            clean = self._needs_clean
            end = self._stream(
                wrapped_argv(argv, clean=clean, workdir=workdir, timeout=timeout),
                stdin=stdin,
                env=env,
                deadline=timeout + 2.0 + 0.05 * timeout,
                out=out,
                err=err,
                kill_on_deadline=True,
            )
            if not clean:
                return end
            if end.exit_code == 125 and CLEANUP_FAILED in err.text():
                if attempt == 0:
                    log.warning("sandbox %s could not be cleaned; replacing it", self.name)
                    out.clear()
                    err.clear()
                    self._remove_container()
                    self._start_container()
                    continue
                raise SandboxError("Could not clean a sandbox even after replacing it.")
            self._needs_clean = False
            return end
        raise AssertionError("unreachable")

    def _stream(
        self,
        argv: list[str],
        *,
        stdin: bytes | None,
        env: dict[str, str],
        deadline: float,
        out: CappedBuffer,
        err: CappedBuffer,
        kill_on_deadline: bool = False,
    ) -> ExecEnd:
        """One exec as the sandbox user; records in ``broken`` what it did to the container."""
        try:
            end = stream_exec(
                self._api,
                self.container_id,
                argv,
                user=self.limits.user,
                stdin=stdin,
                env=env,
                deadline=deadline,
                stdout=out,
                stderr=err,
                on_deadline=self._kill_all if kill_on_deadline else None,
                label=self.name,
            )
        except ContainerGoneError as e:
            self._broken = e.reason
            raise
        if end.broken is not None:
            self._broken = end.broken
        return end

    def _system_exec(self, script: str, deadline: float) -> tuple[ExecEnd, str]:
        """Run a short shell script of the sandbox's own (kill, probe); its end and stdout."""
        out, err = CappedBuffer(4096), CappedBuffer(4096)
        end = self._stream(
            ["sh", "-c", script], stdin=None, env={}, deadline=deadline, out=out, err=err
        )
        return end, out.text()

    def _kill_all(self) -> bool:
        """Kill every process of the sandbox user (not the container's init and keeper)."""
        for attempt in range(5):
            try:
                end, _ = self._system_exec(KILL_ALL, deadline=15.0)
            except SandboxError:
                return False
            if end.exit_code == 0:
                return True
            time.sleep(0.05 * (attempt + 1))
        self._broken = "its processes could not be killed (is the pids limit exhausted?)"
        return False

    def _oom_increased(self) -> bool:
        """Whether the container's memory cgroup OOM-killed something since the last look."""
        try:
            _, report = self._system_exec(READ_OOM, deadline=30.0)
        except SandboxError:
            return False
        count = oom_kills(report)
        seen, self._oom_seen = self._oom_seen, max(self._oom_seen, count)
        return count > seen


def _raise_helper_error(info: dict[str, Any], limits: SandboxLimits) -> None:
    """Raise what the file helper reported (exit 3) as the error the caller should see."""
    kind, path, detail = info.get("error"), info.get("path", "?"), info.get("detail", "")
    if kind == "escape":
        raise SandboxPathError(
            f"Sandbox path {path!r} resolves to {detail!r}, outside the workspace (through a "
            "symlink); only paths inside the workspace may be read or written."
        )
    if kind == "missing":
        raise FileNotFoundError(f"No file {path!r} in the sandbox workspace.")
    if kind in ("notfile", "isdir"):
        raise SandboxPathError(f"Sandbox path {path!r} is a directory, not a file.")
    if kind == "toolarge":
        raise SandboxError(
            f"Sandbox file {path!r} has {detail} bytes, more than limits.max_read_bytes="
            f"{limits.max_read_bytes}; raise the limit to read it."
        )
    if "errno 28" in detail:
        raise SandboxError(
            f"Writing {path!r} failed: the workspace is full (workspace_mb="
            f"{limits.workspace_mb}). Write less or raise limits.workspace_mb."
        )
    raise SandboxError(f"Writing {path!r} in the sandbox failed: {detail or kind}.")
