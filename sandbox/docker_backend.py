"""The Docker backend: one long-lived, locked-down container per sandbox.

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

Output is read incrementally from the exec's socket with ``poll``; each stream keeps at
most ``output_limit`` bytes and the rest is read and dropped.

Every container carries the labels ``agentgym.sandbox=1``, ``agentgym.owner_pid``,
``agentgym.owner_host``, ``agentgym.owner_start`` and ``agentgym.created``. Containers are
removed on :meth:`close`, at interpreter exit and on SIGTERM/SIGINT (handlers chain to
the previous ones); :func:`prune` removes those whose owner process is gone (after a
SIGKILL, for example).

What it does not do: it does not defend against kernel exploits (containers share the
host kernel; use gVisor or a VM for hostile workloads at scale), it does not limit disk
I/O bandwidth, and with ``network=True`` the container gets Docker's default bridge.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as _dt
import functools
import json
import logging
import os
import secrets
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym import SandboxError
from agentgym.sandbox.base import (
    CappedBuffer,
    ExecResult,
    Sandbox,
    SandboxLimits,
    SandboxPathError,
    SandboxUnavailableError,
    check_relative_path,
    command_argv,
    env_strings,
    owner_alive,
    process_start_ticks,
    to_bytes,
)

log = logging.getLogger("agentgym.sandbox")

__all__ = [
    "LABEL",
    "DockerSandbox",
    "docker_client",
    "engine_problem",
    "install_signal_handlers",
    "list_sandbox_containers",
    "prune",
    "remove_live_containers",
]

LABEL = "agentgym.sandbox"
LABEL_PID = "agentgym.owner_pid"
LABEL_HOST = "agentgym.owner_host"
LABEL_START = "agentgym.owner_start"
LABEL_CREATED = "agentgym.created"

WORKSPACE = "/workspace"
#: uid:gid of the container's init and keeper; never the uid commands run as.
KEEPER_USER = "65534:65534"
#: what a command's environment starts from
BASE_ENV = {
    "HOME": WORKSPACE,
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "TMPDIR": "/tmp",
    "PYTHONDONTWRITEBYTECODE": "1",
}
_HELPER_TIMEOUT = 120.0
_CLEANUP_FAILED = "agentgym-sandbox: could not empty the workspace"
# the places a command can write, emptied when a pooled sandbox changes hands
_WRITABLE = ("/workspace", "/tmp", "/dev/shm")
_GLOBS = " ".join(f"{d}/* {d}/.[!.]* {d}/..?*" for d in _WRITABLE)

# Kill every process the sandbox user may signal, except this shell (kill -1 skips the
# caller and pid 1). A builtin in a loop: no fork, so it works when the pids cgroup is
# full; the loop catches processes forked while the first sweep ran.
_KILL_ALL = 'i=0; while kill -9 -1 2>/dev/null && [ "$i" -lt 200 ]; do i=$((i+1)); done; exit 0'

# the OOM-kill counter of the container's memory cgroup (v1, then v2)
_READ_OOM = (
    "cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || "
    "cat /sys/fs/cgroup/memory.events 2>/dev/null; exit 0"
)

# The wrapper every exec runs: $1 = clean first (0/1), $2 = working directory,
# $3 = timeout in seconds, then the command's argv.
_WRAPPER = f"""
if [ "$1" = 1 ]; then
  i=0; while kill -9 -1 2>/dev/null && [ "$i" -lt 200 ]; do i=$((i+1)); done
  dirty=
  for f in {_GLOBS}; do if [ -e "$f" ] || [ -L "$f" ]; then dirty=1; break; fi; done
  if [ -n "$dirty" ]; then
    rm -rf -- {_GLOBS} 2>/dev/null || {{ chmod -R u+rwX {" ".join(_WRITABLE)} 2>/dev/null; rm -rf -- {_GLOBS} 2>/dev/null; }}
    for f in {_GLOBS}; do
      if [ -e "$f" ] || [ -L "$f" ]; then echo '{_CLEANUP_FAILED}' >&2; exit 125; fi
    done
  fi
fi
cd -- "$2" 2>/dev/null || {{ echo "agentgym-sandbox: no directory ${{2#{WORKSPACE}/}} in the workspace" >&2; exit 2; }}
t=$3; shift 3
exec timeout -s KILL "$t" "$@"
"""

# File transfer helper, run with the image's python3 as the sandbox user. It resolves
# every path (symlinks included) and refuses any that lands outside the workspace.
_HELPER = r"""
import json, os, stat, sys
ROOT = "/workspace"
def fail(kind, path, detail=""):
    sys.stdout.write(json.dumps({"error": kind, "path": path, "detail": detail}))
    sys.exit(3)
def resolve(rel):
    real = os.path.realpath(os.path.join(ROOT, rel))
    if real != ROOT and not real.startswith(ROOT + "/"):
        fail("escape", rel, real)
    return real
op = sys.argv[1]
if op == "write":
    data = sys.stdin.buffer.read()
    nl = data.index(b"\n")
    entries = json.loads(data[:nl])
    pos = nl + 1
    plan = []
    for rel, size in entries:
        real = resolve(rel)
        if real == ROOT or os.path.isdir(real):
            fail("isdir", rel)
        plan.append((rel, real, data[pos:pos + size]))
        pos += size
    for rel, real, content in plan:
        try:
            os.makedirs(os.path.dirname(real), exist_ok=True)
            fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(content)
        except OSError as e:
            fail("oserror", rel, f"{e.strerror} (errno {e.errno})")
elif op == "read":
    rel, limit = sys.argv[2], int(sys.argv[3])
    real = resolve(rel)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        fail("missing", rel)
    if not stat.S_ISREG(st.st_mode):
        fail("notfile", rel)
    if st.st_size > limit:
        fail("toolarge", rel, str(st.st_size))
    with open(real, "rb") as f:
        sys.stdout.buffer.write(f.read(limit + 1))
elif op == "list":
    out = []
    for d, dirs, files in os.walk(ROOT):
        for name in files:
            p = os.path.join(d, name)
            if stat.S_ISREG(os.lstat(p).st_mode):
                out.append(os.path.relpath(p, ROOT))
    sys.stdout.write(json.dumps(sorted(out)))
"""


# ---------------------------------------------------------------------------------------
# the engine client


_CLIENT: Any = None
_CLIENT_PID = 0
_CLIENT_LOCK = threading.Lock()


def docker_client() -> Any:
    """The process's Docker SDK client (created on first use; one per process).

    Raises:
        SandboxUnavailableError: no engine answers; the message says how to start one.
    """
    global _CLIENT, _CLIENT_PID
    with _CLIENT_LOCK:
        if _CLIENT is None or os.getpid() != _CLIENT_PID:
            import docker

            try:
                _CLIENT = docker.from_env(max_pool_size=64)
            except Exception as e:
                raise SandboxUnavailableError(engine_problem(e)) from e
            _CLIENT_PID = os.getpid()
        return _CLIENT


def engine_problem(error: BaseException) -> str:
    """Explain why the engine cannot be reached, with the fix."""
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    text = str(error)
    if "Permission denied" in text or isinstance(error, PermissionError):
        return (
            f"Cannot talk to the Docker engine at {where}: permission denied. Fix: add your "
            "user to the 'docker' group (sudo usermod -aG docker $USER, then log in again) "
            "or run as root."
        )
    return (
        f"No Docker engine answers at {where} ({text.strip()[:200]}). Fix: start one "
        "(scripts/ensure_docker.sh installs Debian's docker.io and starts dockerd), set "
        "DOCKER_HOST to a running engine, or use backend='local'."
    )


# ---------------------------------------------------------------------------------------
# containers of this process: removed at exit and on SIGTERM/SIGINT


_LIVE: dict[str, tuple[int, Any]] = {}  # container id -> (owner pid, APIClient)
_LIVE_LOCK = threading.RLock()
_HANDLERS: dict[int, Any] = {}


def _register(container_id: str, api: Any) -> None:
    with _LIVE_LOCK:
        _LIVE[container_id] = (os.getpid(), api)
    install_signal_handlers()


def _unregister(container_id: str) -> None:
    with _LIVE_LOCK:
        _LIVE.pop(container_id, None)


def remove_live_containers() -> int:
    """Remove every container this process created and has not closed; returns how many."""
    with _LIVE_LOCK:
        mine = [(cid, api) for cid, (pid, api) in _LIVE.items() if pid == os.getpid()]
        for cid, _ in mine:
            _LIVE.pop(cid, None)
    if not mine:
        return 0

    def remove(item: tuple[str, Any]) -> None:
        cid, api = item
        with contextlib.suppress(Exception):
            api.remove_container(cid, force=True)

    threads = []
    for item in mine:
        t = threading.Thread(target=remove, args=(item,), daemon=True)
        try:
            t.start()
            threads.append(t)
        except RuntimeError:  # no new threads at interpreter shutdown: do it here
            remove(item)
    for t in threads:
        t.join(timeout=30)
    return len(mine)


atexit.register(remove_live_containers)


def install_signal_handlers() -> bool:
    """Remove this process's containers on SIGTERM and SIGINT, then chain to the old handler.

    With Python's default SIGINT handler the signal only raises ``KeyboardInterrupt`` as
    before; the containers then go with the ``with`` blocks that unwind and, if the
    program ends, with the atexit hook. A signal the program ignores stays ignored.

    Called automatically when the first container starts; signal handlers can only be
    installed from the main thread, so an application that opens its first sandbox from
    another thread should call this once from the main thread. Returns whether the
    handlers are in place.
    """
    if threading.current_thread() is not threading.main_thread():
        return bool(_HANDLERS)
    with _LIVE_LOCK:
        for sig in (signal.SIGTERM, signal.SIGINT):
            current = signal.getsignal(sig)
            if isinstance(current, functools.partial) and current.func is _on_signal:
                continue
            if current == signal.SIG_IGN:
                continue  # the program ignores it and goes on: its sandboxes stay
            _HANDLERS[sig] = current
            signal.signal(sig, functools.partial(_on_signal, previous=current))
    return True


def _on_signal(signum: int, frame: Any, *, previous: Any) -> None:
    if previous is signal.default_int_handler:
        # Ctrl-C raises KeyboardInterrupt: `with` blocks close their sandboxes as it
        # unwinds and the atexit hook removes the rest if the program ends; a program
        # that catches it (a REPL) keeps its sandboxes.
        previous(signum, frame)
        return
    remove_live_containers()
    if callable(previous):
        previous(signum, frame)
    else:  # default action: restore it and deliver the signal again
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


# ---------------------------------------------------------------------------------------
# exec plumbing


@dataclass
class _Raw:
    exit_code: int
    stdout: CappedBuffer
    stderr: CappedBuffer
    duration: float
    host_killed: bool


class _Demux:
    """Splits Docker's multiplexed exec stream (8-byte frame headers) into two buffers."""

    def __init__(self, out: CappedBuffer, err: CappedBuffer) -> None:
        self.out, self.err = out, err
        self.buf = bytearray()
        self.remaining = 0
        self.target = out

    def feed(self, data: bytes) -> None:
        self.buf += data
        while self.buf:
            if self.remaining == 0:
                if len(self.buf) < 8:
                    return
                kind = self.buf[0]
                self.remaining = int.from_bytes(self.buf[4:8], "big")
                del self.buf[:8]
                self.target = self.out if kind == 1 else self.err
                continue
            take = min(self.remaining, len(self.buf))
            self.target.feed(bytes(self.buf[:take]))
            del self.buf[:take]
            self.remaining -= take


class DockerSandbox(Sandbox):
    """A sandbox backed by one Docker container (see the module docstring for what it isolates).

    Args:
        limits: resource and security limits (default :class:`SandboxLimits`).
        image: image to run (default :func:`agentgym.sandbox.image.default_image`). It
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
        if image is None:
            from agentgym.sandbox.image import default_image

            image = default_image()
        self.image = image
        self._name_prefix = name_prefix
        self._api = docker_client().api
        self.container_id: str = ""
        self.name: str = ""
        self._oom_seen = 0
        self._needs_clean = False
        self._broken: str | None = None
        self._start_container()

    # -- container lifecycle -----------------------------------------------------------
    def _start_container(self) -> None:
        from docker.errors import APIError, ImageNotFound
        from docker.types import Ulimit

        lim = self.limits
        uid, gid = lim.user.split(":")
        mem = f"{lim.memory_mb}m"
        host_config = self._api.create_host_config(
            init=True,
            network_mode="bridge" if lim.network else "none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            read_only=lim.read_only_root,
            tmpfs={
                WORKSPACE: f"size={lim.workspace_mb}m,uid={uid},gid={gid},mode=0755,exec",
                "/tmp": f"size={lim.tmp_mb}m,mode=1777,exec",
            },
            mem_limit=mem,
            memswap_limit=mem,
            nano_cpus=int(lim.cpus * 1e9),
            pids_limit=lim.pids,
            ulimits=[
                Ulimit(name="nofile", soft=lim.nofile, hard=lim.nofile),
                Ulimit(name="core", soft=0, hard=0),
            ],
        )
        now = time.time()
        labels = {
            LABEL: "1",
            LABEL_PID: str(os.getpid()),
            LABEL_HOST: socket.gethostname(),
            LABEL_START: process_start_ticks(os.getpid()) or "",
            LABEL_CREATED: _dt.datetime.fromtimestamp(now, _dt.UTC).isoformat(timespec="seconds"),
        }
        name = f"{self._name_prefix}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            created = self._api.create_container(
                self.image,
                command=["infinity"],
                entrypoint=["sleep"],
                user=KEEPER_USER,
                labels=labels,
                name=name,
                hostname="sandbox",
                working_dir=WORKSPACE,
                environment=BASE_ENV,
                host_config=host_config,
            )
        except ImageNotFound as e:
            raise SandboxUnavailableError(_image_missing(self.image)) from e
        except APIError as e:
            if e.status_code == 404 and "image" in str(e).lower():
                raise SandboxUnavailableError(_image_missing(self.image)) from e
            raise SandboxError(f"Docker could not create a sandbox container: {e}") from e
        cid = created["Id"]
        _register(cid, self._api)
        try:
            self._api.start(cid)
        except Exception as e:
            with contextlib.suppress(Exception):
                self._api.remove_container(cid, force=True)
            _unregister(cid)
            raise SandboxError(
                f"Docker could not start the sandbox container: {e}. Run `agentgym sandbox "
                "doctor` to check the engine."
            ) from e
        self.container_id, self.name = cid, name
        self._oom_seen = 0
        self._needs_clean = False
        self._broken = None
        log.debug("started sandbox container %s (%s)", name, cid[:12])

    def _remove_container(self) -> None:
        cid = self.container_id
        if not cid:
            return
        _unregister(cid)
        with contextlib.suppress(Exception):
            self._api.remove_container(cid, force=True)

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

    @property
    def broken(self) -> bool:
        return self._broken is not None

    def healthy(self) -> bool:
        """Not closed, not broken, and the container is running."""
        if self._closed or self._broken:
            return False
        try:
            state = self._api.inspect_container(self.container_id)["State"]
        except Exception:
            return False
        return bool(state.get("Running")) and not state.get("Paused")

    # -- the protocol ---------------------------------------------------------------------
    def run(
        self,
        cmd: str | Sequence[str],
        timeout: float | None = None,
        stdin: str | bytes | None = None,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        argv = command_argv(cmd)
        seconds = self._timeout(timeout)
        extra_env = env_strings(env)
        workdir = WORKSPACE if cwd is None else f"{WORKSPACE}/{check_relative_path(cwd)}"
        data = None if stdin is None else to_bytes(stdin, "stdin")
        with self._lock:
            self._check_usable()
            raw = self._exec_wrapped(
                argv,
                timeout=seconds,
                stdin=data,
                env=extra_env,
                workdir=workdir,
                out_limit=self.limits.output_limit,
            )
            if self._closed:
                raise SandboxError("The sandbox was closed while the command ran.")
            timed_out = raw.host_killed or (raw.exit_code == 137 and raw.duration >= seconds)
            oom = False
            if timed_out:
                if not raw.host_killed:
                    self._kill_all()  # processes that left the process group
            elif raw.exit_code != 0:
                oom = self._oom_increased()
        return ExecResult(
            exit_code=raw.exit_code,
            stdout=raw.stdout.text(),
            stderr=raw.stderr.text(),
            timed_out=timed_out,
            duration=raw.duration,
            stdout_truncated=raw.stdout.truncated,
            stderr_truncated=raw.stderr.truncated,
            oom_killed=oom,
        )

    def write_files(self, files: Mapping[str, str | bytes]) -> None:
        entries: list[list[Any]] = []
        blobs: list[bytes] = []
        for path, content in files.items():
            rel = check_relative_path(path)
            blob = to_bytes(content, path)
            entries.append([rel, len(blob)])
            blobs.append(blob)
        if not entries:
            return
        payload = json.dumps(entries).encode() + b"\n" + b"".join(blobs)
        self._helper(["write"], stdin=payload, out_limit=64 * 1024)

    def read_bytes(self, path: str) -> bytes:
        rel = check_relative_path(path)
        limit = self.limits.max_read_bytes
        return self._helper(["read", rel, str(limit)], out_limit=limit + 1)

    def list_files(self) -> list[str]:
        out = self._helper(["list"], out_limit=self.limits.max_read_bytes)
        return list(json.loads(out))

    # -- internals ----------------------------------------------------------------------------
    def _check_usable(self) -> None:
        self._check_open()
        if self._broken:
            raise SandboxError(
                f"This sandbox is broken ({self._broken}); close it and open a new one "
                "(a SandboxPool replaces broken sandboxes by itself)."
            )

    def _helper(self, args: list[str], *, stdin: bytes | None = None, out_limit: int) -> bytes:
        argv = ["python3", "-I", "-S", "-c", _HELPER, *args]
        with self._lock:
            self._check_usable()
            raw = self._exec_wrapped(
                argv,
                timeout=_HELPER_TIMEOUT,
                stdin=stdin,
                env={},
                workdir=WORKSPACE,
                out_limit=out_limit,
            )
        if raw.exit_code == 0:
            if raw.stdout.truncated:
                raise SandboxError(
                    f"The reply to {args[0]!r} exceeded {out_limit} bytes; raise "
                    "limits.max_read_bytes to read larger files."
                )
            return raw.stdout.getvalue()
        if raw.exit_code == 3:
            _raise_helper_error(json.loads(raw.stdout.text()), self.limits)
        hint = ""
        if raw.exit_code == 127:
            hint = " The image needs python3 for file transfer."
        raise SandboxError(
            f"Sandbox file operation {args[0]!r} failed (exit {raw.exit_code}): "
            f"{raw.stderr.text().strip()[-500:]}{hint}"
        )

    def _exec_wrapped(
        self,
        argv: list[str],
        *,
        timeout: float,
        stdin: bytes | None,
        env: dict[str, str],
        workdir: str,
        out_limit: int,
    ) -> _Raw:
        for attempt in (0, 1):
            clean = self._needs_clean
            wrapped = [
                "sh",
                "-c",
                _WRAPPER,
                "agentgym-sandbox",
                "1" if clean else "0",
                workdir,
                f"{timeout:.3f}",
                *argv,
            ]
            raw = self._exec(
                wrapped,
                stdin=stdin,
                env=env,
                deadline=timeout + 2.0 + 0.05 * timeout,
                out_limit=out_limit,
                kill_on_deadline=True,
            )
            if not clean:
                return raw
            if raw.exit_code == 125 and _CLEANUP_FAILED in raw.stderr.text():
                if attempt == 0:
                    log.warning("sandbox %s could not be cleaned; replacing it", self.name)
                    self._remove_container()
                    self._start_container()
                    continue
                raise SandboxError("Could not clean a sandbox even after replacing it.")
            self._needs_clean = False
            return raw
        raise AssertionError("unreachable")

    def _exec(
        self,
        argv: list[str],
        *,
        stdin: bytes | None,
        env: Mapping[str, str],
        deadline: float | None,
        out_limit: int,
        kill_on_deadline: bool = False,
    ) -> _Raw:
        """One docker exec, streamed: capped output, stdin fed, host-side deadline.

        At the deadline a user command (``kill_on_deadline``) has every process of the
        sandbox user killed and gets 10 more seconds to end its output; a system exec
        (kill, probe) is simply abandoned.
        """
        from docker.errors import APIError, NotFound

        out, err = CappedBuffer(out_limit), CappedBuffer(out_limit)
        demux = _Demux(out, err)
        start = time.monotonic()
        try:
            exec_id = self._api.exec_create(
                self.container_id,
                argv,
                stdout=True,
                stderr=True,
                stdin=stdin is not None,
                user=self.limits.user,
                environment=dict(env) if env else None,
                workdir=WORKSPACE,
            )["Id"]
            sock = self._api.exec_start(exec_id, socket=True)
        except (NotFound, APIError) as e:
            self._broken = f"the container is gone or stopped: {str(e)[:200]}"
            raise SandboxError(
                f"Sandbox container {self.name} cannot run commands: {e}. Close this sandbox "
                "and open a new one."
            ) from e
        host_killed = False
        try:
            raw_sock, pending = _raw_socket(sock)
            demux.feed(pending)
            host_killed = self._pump(raw_sock, demux, stdin, start, deadline, kill_on_deadline)
        finally:
            _close_socket(sock)
        duration = time.monotonic() - start
        exit_code = self._exit_code(exec_id)
        return _Raw(exit_code, out, err, duration, host_killed)

    def _pump(
        self,
        sock: socket.socket,
        demux: _Demux,
        stdin: bytes | None,
        start: float,
        deadline: float | None,
        kill_on_deadline: bool,
    ) -> bool:
        """Move bytes until the exec's stream ends; returns whether the host had to kill."""
        to_send = memoryview(stdin) if stdin else None
        if stdin is not None and not stdin:
            _shutdown_write(sock)
        poller = select.poll()
        fd = sock.fileno()
        flags = select.POLLIN | (select.POLLOUT if to_send is not None else 0)
        poller.register(fd, flags)
        killed = False
        limit_at = None if deadline is None else start + deadline
        while True:
            wait_ms = None
            if limit_at is not None:
                left = limit_at - time.monotonic()
                if left <= 0:
                    if killed or not kill_on_deadline:
                        self._broken = "a command's processes could not be killed"
                        log.warning("sandbox %s: output did not end after a kill", self.name)
                        return True
                    log.debug("sandbox %s: host-side kill at the deadline", self.name)
                    self._kill_all()
                    killed = True
                    limit_at = time.monotonic() + 10.0
                    continue
                wait_ms = max(1, int(left * 1000))
            events = poller.poll(wait_ms)
            for _, ev in events:
                if ev & select.POLLOUT and to_send is not None:
                    try:
                        n = sock.send(to_send[: 256 * 1024])
                        to_send = to_send[n:]
                    except BlockingIOError:
                        n = 0
                    except OSError:  # the command closed its stdin or exited
                        to_send = memoryview(b"")
                    if not to_send:
                        to_send = None
                        _shutdown_write(sock)
                        poller.modify(fd, select.POLLIN)
                if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                    try:
                        data = sock.recv(256 * 1024)
                    except BlockingIOError:
                        continue
                    except OSError:
                        return killed
                    if not data:
                        return killed
                    demux.feed(data)

    def _exit_code(self, exec_id: str) -> int:
        for _ in range(400):
            try:
                info = self._api.exec_inspect(exec_id)
            except Exception as e:  # the container went away under the command
                self._broken = f"the container is gone: {str(e)[:200]}"
                return -1
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            time.sleep(0.005)
        return -1

    def _kill_all(self) -> bool:
        """Kill every process of the sandbox user (not the container's init and keeper)."""
        for attempt in range(5):
            try:
                raw = self._exec(
                    ["sh", "-c", _KILL_ALL],
                    stdin=None,
                    env={},
                    deadline=15.0,
                    out_limit=4096,
                )
            except SandboxError:
                return False
            if raw.exit_code == 0:
                return True
            time.sleep(0.05 * (attempt + 1))
        self._broken = "its processes could not be killed (is the pids limit exhausted?)"
        return False

    def _oom_increased(self) -> bool:
        """Whether the container's memory cgroup OOM-killed something since the last look."""
        try:
            raw = self._exec(
                ["sh", "-c", _READ_OOM],
                stdin=None,
                env={},
                deadline=30.0,
                out_limit=4096,
            )
        except SandboxError:
            return False
        count = 0
        for line in raw.stdout.text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                count = max(count, int(value))
        seen, self._oom_seen = self._oom_seen, max(self._oom_seen, count)
        return count > seen

    def describe(self) -> str:
        return f"{super().describe()}; image {self.image}; container {self.name}"


def _raise_helper_error(info: dict[str, str], limits: SandboxLimits) -> None:
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


def _image_missing(image: str) -> str:
    return (
        f"Docker image {image!r} is not there. Build the default sandbox image with "
        "`agentgym sandbox build-image` (nothing can be pulled on these machines), or set "
        "AGENTGYM_SANDBOX_IMAGE / image= to an image you have (see `docker images`)."
    )


def _raw_socket(sock: Any) -> tuple[socket.socket, bytes]:
    """The exec's raw socket, non-blocking, and any bytes the HTTP layer already buffered.

    The SDK reads the response headers through a buffered reader that may have pulled in
    the first output frames too; those bytes are taken from its buffer, then the socket is
    read directly.
    """
    raw = getattr(sock, "_sock", sock)
    if not isinstance(raw, socket.socket):
        raise SandboxError(
            "This Docker connection type (ssh or named pipe) is not supported by the "
            "sandbox; use a unix socket or tcp DOCKER_HOST."
        )
    raw.setblocking(False)
    pending = b""
    response = getattr(sock, "_response", None)
    if response is not None:
        try:
            pending = response.raw._fp.fp.peek() or b""
        except (AttributeError, BlockingIOError, OSError, ValueError):
            pending = b""
    return raw, pending


def _shutdown_write(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)


def _close_socket(sock: Any) -> None:
    response = getattr(sock, "_response", None)
    for thing in (sock, getattr(sock, "_sock", None), response):
        if thing is not None:
            with contextlib.suppress(Exception):
                thing.close()


# ---------------------------------------------------------------------------------------
# finding and pruning leftovers


def list_sandbox_containers(*, owner_pid: int | None = None) -> list[dict[str, Any]]:
    """Every agentgym sandbox container on the engine (running or not), as the engine
    lists them; optionally only those of one owner process."""
    filters = [f"{LABEL}=1"]
    if owner_pid is not None:
        filters.append(f"{LABEL_PID}={owner_pid}")
    return docker_client().api.containers(all=True, filters={"label": filters})


def prune(*, everything: bool = False, dry_run: bool = False) -> list[str]:
    """Remove sandbox containers whose owner process is gone.

    A container is a leftover when it was created on this host (label
    ``agentgym.owner_host`` equals this host name) and its owner pid is no longer alive
    (or was reused by a process that started later). Containers from other hosts sharing
    the engine are left alone, since their owners cannot be checked from here.

    Args:
        everything: remove every agentgym sandbox container, live owners included.
        dry_run: only report what would be removed.

    Returns:
        The names of the containers removed (or that would be).
    """
    api = docker_client().api
    host = socket.gethostname()
    doomed: list[tuple[str, str]] = []
    for c in list_sandbox_containers():
        labels = c.get("Labels") or {}
        name = (c.get("Names") or ["?"])[0].lstrip("/")
        if not everything:
            if labels.get(LABEL_HOST) != host:
                continue
            try:
                pid = int(labels.get(LABEL_PID, ""))
            except ValueError:
                pid = -1
            if owner_alive(pid, labels.get(LABEL_START) or None):
                continue
        doomed.append((c["Id"], name))
    if dry_run:
        return [name for _, name in doomed]
    removed: list[str] = []
    lock = threading.Lock()

    def remove(item: tuple[str, str]) -> None:
        cid, name = item
        try:
            api.remove_container(cid, force=True)
        except Exception as e:  # already gone, or removal in progress elsewhere
            if "No such container" not in str(e) and "already in progress" not in str(e):
                log.warning("could not remove %s: %s", name, e)
                return
        with lock:
            removed.append(name)

    _parallel(remove, doomed)
    return sorted(removed)


def _parallel(fn: Callable[[Any], None], items: Sequence[Any], width: int = 8) -> None:
    from concurrent.futures import ThreadPoolExecutor

    if not items:
        return
    try:
        with ThreadPoolExecutor(max_workers=min(width, len(items))) as ex:
            list(ex.map(fn, items))
    except RuntimeError:  # at interpreter exit no new threads: one at a time
        for item in items:
            fn(item)
