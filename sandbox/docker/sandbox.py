"""The Docker sandbox class: one long-lived, locked-down container per :class:`DockerSandbox`.

Isolation (defaults, each configurable through :class:`~agentgym.sandbox.SandboxLimits`):

* no network (``network_mode="none"``: the container has only its own loopback),
* every capability dropped, ``no-new-privileges``, Docker's default seccomp profile (the
  bounding set keeps only ``CAP_DAC_OVERRIDE``, which only a command run as root by the
  host can hold; the sandbox user never does),
* read-only root filesystem; the only writable places are size-bounded tmpfs mounts:
  ``/workspace`` (the workspace) and ``/tmp`` (both root's and sticky, so no holder can
  change their mount roots), and Docker's ``/dev/shm`` and ``/dev/mqueue``,
* System V IPC of its own (``ipc_mode="private"``), with ``kernel.shm_rmid_forced=1``: a
  shared-memory segment dies with the last process attached to it,
* memory (swap included), CPU and pids limits from the container's cgroups,
* commands run as a non-root user (``1000:1000``); the container's own processes (an init
  and an idle keeper) run as root, so nothing a command does can signal them and stop the
  container (signalling another uid needs ``CAP_KILL``),
* an init process (Docker's ``init=True``) that reaps orphans.

How a command runs: each :meth:`DockerSandbox.run` is one ``docker exec`` of a small shell
wrapper that ``exec``\\ s ``timeout -s KILL T`` around the command. At the deadline
``timeout`` kills the command's whole process group with SIGKILL, from inside the
container, without starting a new process (this matters when a fork bomb has used every
pid). After any timeout the sandbox also kills every process of the sandbox user (``kill
-9 -1`` from one more exec) so that processes that left the process group die too. If
the output stream stays open past the deadline plus a grace period, that kill happens
from the host side.

Two users: commands run as ``limits.user`` unless the caller names another uid
(``run(..., user="0:0")``; never the keeper's uid). Processes of different uids cannot
signal, trace or read the memory of each other (no ``CAP_KILL``, no ``CAP_SYS_PTRACE``),
and private files are protected by their modes, so one container can hold a grader and
the code it grades. Root in the container is such a second user with one power more:
``CAP_DAC_OVERRIDE``, so it may read and change whatever the sandbox user wrote. A
reset then cleans once per user that ran something: each other user first (what it may
remove: its processes, files, IPC objects), then the sandbox user, whose pass checks
that the container is back to its idle state: no process but its init and keeper, no
file in the writable places, no System V IPC object, no more memory than an idle
container holds (else the container is replaced; docs/sandbox.md has the table of what
a holder can leave and what clears it). :meth:`~agentgym.sandbox.Sandbox.start` runs a command detached.

A container that dies under a command (killed or removed from outside, the engine
restarted) is not a command result: any failed exec is followed by a look at the
container, and a container that is no longer running raises
:class:`~agentgym.sandbox.docker.streaming.ContainerGoneError`, an
:class:`agentgym.InfraError` with ``reason="sandbox_died"`` (``"docker_unreachable"`` when
the engine does not answer). The sandbox is then broken; a pool replaces it.

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
import threading
import time
from typing import Any

from agentgym import InfraError, SandboxError
from agentgym.sandbox.base import ExecStatus, Sandbox
from agentgym.sandbox.capture import CappedBuffer
from agentgym.sandbox.docker.client import docker_client
from agentgym.sandbox.docker.containers import remove_container, start_container
from agentgym.sandbox.docker.image import default_image
from agentgym.sandbox.docker.leftovers import prune
from agentgym.sandbox.docker.scripts import (
    CLEAN,
    CLEAN_PARTLY,
    CLEANED,
    CLEANUP_FAILED,
    HELPER_TIMEOUT,
    KILL_ALL,
    KILL_ALL_ROOT,
    NO_CLEAN,
    READ_OOM,
    WORKSPACE,
    helper_argv,
    is_root_user,
    oom_kills,
    wrapped_argv,
)
from agentgym.sandbox.docker.streaming import (
    ContainerGoneError,
    ExecEnd,
    engine_errors,
    start_detached,
    stream_exec,
    unreachable,
)
from agentgym.sandbox.errors import SandboxPathError
from agentgym.sandbox.limits import SandboxLimits

log = logging.getLogger("agentgym.sandbox")

#: how long a container that a SIGKILL-ed command leaves looking alive is looked at again
#: before the kill counts as the command's own (an OOM kill, ``kill -9``): the engine
#: records a killed container's state a moment after its processes died
KILLED_SETTLE_S = 1.0

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
    supports_users = True

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
        self._other_users: set[str] = set()  # uids besides limits.user that ran commands
        _prune_once()
        self._start_container()

    # -- container lifecycle -----------------------------------------------------------
    def _start_container(self) -> None:
        try:
            self.container_id, self.name = start_container(
                self._api, self.image, self.limits, self._name_prefix
            )
        except engine_errors() as e:
            raise unreachable(self._name_prefix, e) from e
        self._oom_seen = 0
        self._needs_clean = False
        self._other_users = set()
        self._broken = None
        self._layer = self._writable_layer()

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
        """Mark the sandbox for cleaning: the next call kills every process, empties the
        writable places and checks that the container is back to its idle state first,
        inside the same exec (so the pool adds no extra exec). With a writable root
        (``read_only_root=False``) a container whose writable layer changed is replaced now."""
        self._check_open()
        if self._writable_layer() != self._layer:
            log.info("sandbox %s: its writable layer changed; replacing it", self.name)
            with self._lock:
                self._replace()
            return
        self._needs_clean = True

    def _writable_layer(self) -> list[Any] | None:
        """What the container changed in its image's files (``docker diff``), or None
        with a read-only root, which no command can change."""
        if self.limits.read_only_root:
            return None
        try:
            return sorted((c["Path"], c["Kind"]) for c in self._api.diff(self.container_id) or [])
        except engine_errors() as e:
            raise unreachable(self.name, e) from e

    def healthy(self) -> bool:
        """Not closed, not broken, and the container is running (not paused, restarting,
        being removed or dead)."""
        if self._closed or self._broken:
            return False
        try:
            state = self._api.inspect_container(self.container_id)["State"]
        except Exception:
            return False
        return _running(state)

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
        user: str | None = None,
    ) -> ExecStatus:
        workdir = WORKSPACE if cwd is None else f"{WORKSPACE}/{cwd}"
        end = self._exec_wrapped(
            argv,
            timeout=timeout,
            stdin=stdin,
            env=env,
            workdir=workdir,
            out=stdout,
            err=stderr,
            user=self._other_user(user),
        )
        if self._closed:
            raise SandboxError("The sandbox was closed while the command ran.")
        timed_out = end.host_killed or (end.exit_code == 137 and end.duration >= timeout)
        oom = False
        if timed_out:
            if not end.host_killed:
                self._kill_all(self._other_user(user))  # processes that left the group
        elif end.exit_code != 0:
            oom = self._oom_increased()
        return ExecStatus(end.exit_code, end.duration, timed_out=timed_out, oom_killed=oom)

    def _start(
        self,
        argv: list[str],
        *,
        timeout: float,
        env: dict[str, str],
        cwd: str | None,
        user: str | None,
    ) -> None:
        user = self._other_user(user)
        if self._needs_clean:
            self._clean_every_user()
        if user is not None:
            self._other_users.add(user)
        workdir = WORKSPACE if cwd is None else f"{WORKSPACE}/{cwd}"
        wrapped = wrapped_argv(argv, clean=NO_CLEAN, workdir=workdir, timeout=timeout)
        try:
            start_detached(
                self._api,
                self.container_id,
                wrapped,
                user=user or self.limits.user,
                env=env,
                label=self.name,
            )
        except ContainerGoneError as e:
            self._broken = e.detail
            raise

    def _other_user(self, user: str | None) -> str | None:
        return None if user is None or user == self.limits.user else user

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
            f"Sandbox file operation {args[0]!r} failed ({_engine_said(end, out, err)}).{hint}"
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
        user: str | None = None,
    ) -> ExecEnd:
        """Run ``argv`` inside the wrapper (as ``user``, default ``limits.user``), cleaning
        up after the previous holder first when :meth:`reset` asked for it.

        A container that cannot be cleaned is replaced and the command runs in the fresh
        one: the wrapper could not empty the writable places, or the engine could not start
        the exec at all (the wrapper's :data:`CLEANED` mark is missing), as when the previous
        holder's processes fill the pids or memory limit the exec's own processes count in.
        """
        if self._needs_clean and (user is not None or self._other_users):
            self._clean_every_user(then_sandbox_user=user is not None)
        if user is not None:
            self._other_users.add(user)
        clean = self._needs_clean
        err.limit += len(CLEANED) if clean else 0
        end = self._stream(
            wrapped_argv(
                argv, clean=CLEAN if clean else NO_CLEAN, workdir=workdir, timeout=timeout
            ),
            stdin=stdin,
            env=env,
            deadline=timeout + 2.0 + 0.05 * timeout,
            out=out,
            err=err,
            kill_on_deadline=True,
            user=user,
        )
        if not clean:
            return end
        err.limit -= len(CLEANED)
        if err.drop_prefix(CLEANED):
            self._needs_clean = False
            return end
        failed = CLEANUP_FAILED if end.exit_code == 125 else _engine_said(end, out, err)
        log.warning("sandbox %s could not be cleaned (%s); replacing it", self.name, failed)
        out.clear()
        err.clear()
        self._replace()  # a fresh container: the command runs again there, with no clean
        return self._exec_wrapped(
            argv,
            timeout=timeout,
            stdin=stdin,
            env=env,
            workdir=workdir,
            out=out,
            err=err,
            user=user,
        )

    def _clean_every_user(self, then_sandbox_user: bool = True) -> None:
        """Kill every process and remove every file of every user that ran commands.

        Each other user goes first, removing what it may: the unprivileged ones (their
        processes killed), then root ones (any uid-0 user, whatever its gid; root may
        remove anything the other users wrote); the sandbox user's pass comes last and
        checks that nothing is left, else the container is replaced. With
        ``then_sandbox_user=False`` that last pass is left to the next command's own exec
        (no extra exec when the next command is the sandbox user's).
        """
        others = sorted(self._other_users, key=lambda u: (is_root_user(u), u))
        passes = [(u, CLEAN_PARTLY) for u in others]
        if then_sandbox_user:
            passes.append((None, CLEAN))
        for user, mode in passes:
            out, err = CappedBuffer(4096), CappedBuffer(4096)
            argv = wrapped_argv(
                ["true"],
                clean=mode,
                workdir="/",  # not the workspace: its holder may have closed it to others
                timeout=HELPER_TIMEOUT,
                root=is_root_user(user),
            )
            end = self._stream(
                argv,
                stdin=None,
                env={},
                deadline=HELPER_TIMEOUT + 5.0,
                out=out,
                err=err,
                user=user,
            )
            if end.exit_code != 0:
                log.warning("sandbox %s could not be cleaned; replacing it", self.name)
                self._replace()
                return
        self._other_users.clear()
        self._needs_clean = not then_sandbox_user

    def _replace(self) -> None:
        self._remove_container()
        self._start_container()

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
        user: str | None = None,
    ) -> ExecEnd:
        """One exec (as ``user``, default the sandbox user); records in ``broken`` what it
        did to the container, and raises when the container died under it."""
        try:
            end = stream_exec(
                self._api,
                self.container_id,
                argv,
                user=user or self.limits.user,
                stdin=stdin,
                env=env,
                deadline=deadline,
                stdout=out,
                stderr=err,
                on_deadline=(lambda: self._kill_all(user)) if kill_on_deadline else None,
                label=self.name,
                not_running=self._not_running,
            )
        except ContainerGoneError as e:
            self._broken = e.detail
            raise
        except InfraError:
            self._broken = "the Docker engine stopped answering"
            raise
        if end.broken is not None:
            self._broken = end.broken
        if end.exit_code != 0:
            # a command ended by a SIGKILL not the host's (or with no exit code) may be the
            # container's death that the engine's state does not show yet: a moment for it
            killed = end.exit_code in (137, -1) and not end.host_killed
            self._check_alive(settle_s=KILLED_SETTLE_S if killed else 0.0)
        return end

    def _not_running(self) -> str | None:
        """Why the container cannot finish a command now (paused, stopped), or None
        (also when the engine does not answer: the exec's own errors say that)."""
        try:
            state = self._api.inspect_container(self.container_id)["State"]
        except Exception:
            return None
        if _running(state):
            return None
        return f"its state is {state.get('Status')!r}"

    def _check_alive(self, settle_s: float = 0.0) -> None:
        """Raise :class:`ContainerGoneError` if the container is no longer running (a
        failed exec may be the container's death, not the command's exit). ``settle_s``:
        how long a container that still looks alive is looked at again (the engine records
        a killed container's state a moment after its processes died: on a busy machine,
        after the exec's own end)."""
        if self._closed:
            return  # closed by its holder meanwhile: run() says so
        from docker.errors import NotFound

        until = time.monotonic() + settle_s
        while True:
            try:
                state = self._api.inspect_container(self.container_id)["State"]
            except NotFound as e:
                state, why = None, f"it was removed ({e})"
                break
            except engine_errors() as e:
                self._broken = "the Docker engine stopped answering"
                raise unreachable(self.name, e) from e
            why = f"its state is {state.get('Status')!r}, exit code {state.get('ExitCode')}"
            if not _running(state):
                break
            if time.monotonic() >= until:
                return
            time.sleep(0.1)
        self._broken = f"the container died: {why}"
        raise ContainerGoneError(
            f"Sandbox container {self.name} died under a command ({why}): it was killed or "
            "removed from outside, or the engine restarted. The episode cannot be scored; "
            "a SandboxPool replaces the sandbox.",
            detail=self._broken,
        )

    def _system_exec(
        self, script: str, deadline: float, user: str | None = None
    ) -> tuple[ExecEnd, str]:
        """Run a short shell script of the sandbox's own (kill, probe); its end and stdout."""
        out, err = CappedBuffer(4096), CappedBuffer(4096)
        end = self._stream(
            ["sh", "-c", script], stdin=None, env={}, deadline=deadline, out=out, err=err, user=user
        )
        return end, out.text()

    def _kill_all(self, user: str | None = None) -> bool:
        """Kill every process of ``user`` (default the sandbox user; for root, every root
        process but the container's init and keeper)."""
        script = KILL_ALL_ROOT if is_root_user(user) else KILL_ALL
        for attempt in range(5):
            try:
                end, _ = self._system_exec(script, deadline=15.0, user=user)
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


def _engine_said(end: ExecEnd, out: CappedBuffer, err: CappedBuffer) -> str:
    """What a failed exec left to read: the engine writes why it could not start one
    (``OCI runtime exec failed: ...``) on the stdout stream, with exit code 126."""
    said = (err.text().strip() or out.text().strip())[-300:]
    return f"exit {end.exit_code}" + (f", {said!r}" if said else ", no output")


def _running(state: dict[str, Any]) -> bool:
    """Whether a container's ``State`` says it can run commands."""
    return (
        bool(state.get("Running"))
        and state.get("Status", "running") == "running"
        and not state.get("Paused")
        and not state.get("Restarting")
        and not state.get("Dead")
    )


_PRUNED = threading.Event()
_PRUNE_LOCK = threading.Lock()


def _prune_once() -> None:
    """Remove, once per process, the containers of agentgym processes that died (SIGKILL,
    OOM, a crashed machine) before they could remove them."""
    if _PRUNED.is_set():
        return
    with _PRUNE_LOCK:
        if _PRUNED.is_set():
            return
        _PRUNED.set()
        try:
            removed = prune()
        except Exception as e:  # the engine misbehaves: the sandbox itself will say so
            log.debug("pruning leftover sandbox containers failed: %s", e)
            return
        if removed:
            log.info("removed %d leftover sandbox container(s) of dead processes", len(removed))


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
