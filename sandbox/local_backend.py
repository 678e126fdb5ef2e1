"""The local backend: a temporary workspace on this machine, isolated as far as it can be.

It is the embedded default where no Docker engine runs (a laptop, a CI job without an
engine). It picks the strongest of three levels that works here; ``LocalSandbox.isolation``
says which one it got, and ``level=`` forces one.

Every level, always:
    * a fresh temporary workspace (and a private ``TMPDIR``), deleted on ``close``;
    * an empty environment apart from ``PATH``, ``HOME``, ``TMPDIR``, ``LANG`` and what
      the caller passes;
    * rlimits on every process: address space (``memory_mb``), CPU seconds, open files,
      file size (``workspace_mb``), no core dumps, and processes (``pids`` more than the
      sandbox user already runs);
    * when agentgym itself runs as root, commands run as ``nobody`` (65534), never root;
    * the timeout kills the command's whole process group with SIGKILL, so processes that
      ignore SIGTERM die too; output is capped per stream, the rest drained and dropped.

``"bwrap"`` (bubblewrap, unprivileged user namespaces):
    Isolates: every namespace is new (user, pid, network, ipc, uts, mount, cgroup): no
    network but a private loopback, no view of host processes, host uid hidden (commands
    see uid 1000). The filesystem is built from scratch: ``/usr`` (and the ``/bin``,
    ``/lib`` links) and a short list of ``/etc`` files read-only, fresh ``/proc`` and
    ``/dev``, the workspace at ``/workspace`` and ``/tmp`` writable; nothing else of the
    host (no ``/home``, ``/root``, ``/var``, ``/opt``) is visible. All capabilities are
    dropped; the sandbox dies with its parent; when the command ends, every process it
    left behind is killed with the pid namespace.
    Does not isolate: memory is bounded per process (address space), not in total; the
    workspace size is bounded per file only; CPU share is not limited; no seccomp filter
    (the whole kernel syscall surface is reachable); what ``/usr`` and the listed
    ``/etc`` files contain is readable.

``"unshare"`` (util-linux ``unshare`` with a user namespace):
    Isolates: new user, pid, network, ipc, uts, mount and cgroup namespaces: no network,
    no view of host processes, leftovers die with the pid namespace, commands see uid
    1000 without capabilities.
    Does not isolate: the filesystem. Commands see the host's files and can read or write
    anything the host user (``nobody`` when agentgym runs as root) can. Same memory, disk
    and CPU caveats as bwrap.

``"rlimits"`` (plain subprocess):
    Isolates: only the rlimits above, the process group kill and, as root, the switch
    to ``nobody``.
    Does not isolate: network (fully open), filesystem (everything the user can reach),
    other processes (visible, and signalable when they belong to the same user), and a
    process that calls ``setsid()`` escapes the timeout kill. Use it only for code you
    would run yourself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import resource
import select
import selectors
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence

from agentgym import ConfigError, SandboxError
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
    exit_code_from_status,
    process_start_ticks,
    to_bytes,
)

log = logging.getLogger("agentgym.sandbox")

__all__ = ["LEVELS", "LocalSandbox", "available_levels", "best_level"]

#: isolation levels, strongest first
LEVELS: tuple[str, ...] = ("bwrap", "unshare", "rlimits")
NOBODY = 65534
INNER_UID = 1000  # the uid commands see inside a user namespace
INNER_WORKSPACE = "/workspace"
_SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
# /etc entries a program commonly needs (loader cache, users, time zone, certificates)
_ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "passwd",
    "group",
    "nsswitch.conf",
    "localtime",
    "timezone",
    "ssl",
    "ca-certificates",
    "mime.types",
    "python3",
    "python3.11",
    "os-release",
    "debian_version",
)

_LEVEL_CACHE: dict[tuple[str, int | None], str | None] = {}
_LEVEL_LOCK = threading.Lock()


def _drop_uid() -> int | None:
    """The uid to run commands as: ``nobody`` when we are root, else our own (None)."""
    return NOBODY if os.geteuid() == 0 else None


def _probe(level: str) -> str | None:
    """``None`` when ``level`` works here, else why not."""
    uid = _drop_uid()
    key = (level, uid)
    with _LEVEL_LOCK:
        if key in _LEVEL_CACHE:
            return _LEVEL_CACHE[key]
    if level == "rlimits":
        why = None
    else:
        tool = "bwrap" if level == "bwrap" else "unshare"
        if shutil.which(tool) is None:
            pkg = "bubblewrap" if tool == "bwrap" else "util-linux"
            why = f"{tool} is not installed (apt-get install {pkg})"
        else:
            with tempfile.TemporaryDirectory(prefix="agentgym-probe-") as d:
                os.chmod(d, 0o755)
                argv = [*_prefix(level, d, d, INNER_WORKSPACE), "true"]
                try:
                    p = subprocess.run(
                        argv,
                        stdin=subprocess.DEVNULL,
                        capture_output=True,
                        timeout=20,
                        user=uid,
                        group=uid,
                        extra_groups=[] if uid is not None else None,
                    )
                    why = (
                        None
                        if p.returncode == 0
                        else (
                            f"{tool} failed here ({p.stderr.decode(errors='replace').strip()[:200]}); "
                            "unprivileged user namespaces may be disabled "
                            "(sysctl kernel.unprivileged_userns_clone=1)"
                        )
                    )
                except (OSError, subprocess.SubprocessError) as e:
                    why = f"{tool} could not run: {e}"
    with _LEVEL_LOCK:
        _LEVEL_CACHE[key] = why
    return why


def available_levels() -> dict[str, str | None]:
    """Each level -> ``None`` if it works on this machine, else the reason it does not."""
    return {level: _probe(level) for level in LEVELS}


def best_level() -> str:
    """The strongest level that works here."""
    for level in LEVELS:
        if _probe(level) is None:
            return level
    return "rlimits"


def _prefix(
    level: str,
    workspace: str,
    tmp: str,
    inner: str,
    cwd: str | None = None,
    info_fd: int | None = None,
) -> list[str]:
    """The argv that wraps a command at ``level``."""
    if level == "bwrap":
        argv = [
            "bwrap",
            *(["--info-fd", str(info_fd)] if info_fd is not None else []),
            "--unshare-all",
            "--unshare-user",
            "--uid",
            str(INNER_UID),
            "--gid",
            str(INNER_UID),
            "--die-with-parent",
            "--new-session",
            "--hostname",
            "sandbox",
            "--ro-bind",
            "/usr",
            "/usr",
        ]
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            path = "/" + name
            if os.path.islink(path):
                argv += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                argv += ["--ro-bind", path, path]
        for name in _ETC:
            path = "/etc/" + name
            if os.path.exists(path):
                argv += ["--ro-bind", path, path]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        argv += ["--bind", workspace, inner, "--bind", tmp, "/tmp"]
        argv += ["--chdir", cwd or inner, "--"]
        return argv
    if level == "unshare":
        return [
            "unshare",
            "--user",
            f"--map-user={INNER_UID}",
            f"--map-group={INNER_UID}",
            "--net",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--ipc",
            "--uts",
            "--cgroup",
            "--",
        ]
    return []


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


class LocalSandbox(Sandbox):
    """A sandbox in a temporary directory (see the module docstring for each level).

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
            why = _probe(level)
            if why is not None:
                raise SandboxUnavailableError(
                    f"Local sandbox level {level!r} is not available: {why}. "
                    f"Pick another level or leave level=None (best here: {best_level()!r})."
                )
        self.isolation = level
        self._uid = _drop_uid()
        self._root = tempfile.mkdtemp(prefix="agentgym-sandbox-")
        self.workspace = os.path.join(self._root, "workspace")
        self._tmp = os.path.join(self._root, "tmp")
        os.mkdir(self.workspace, 0o755)
        os.mkdir(self._tmp, 0o700)
        if self._uid is not None:
            os.chmod(self._root, 0o711)
            for path in (self.workspace, self._tmp):
                os.chown(path, self._uid, self._uid)

    # -- the protocol -------------------------------------------------------------------
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
        extra = env_strings(env)
        data = None if stdin is None else to_bytes(stdin, "stdin")
        with self._lock:
            self._check_open()
            inner = INNER_WORKSPACE if self.isolation == "bwrap" else self.workspace
            host_cwd, inner_cwd = self.workspace, inner
            if cwd is not None:
                rel = check_relative_path(cwd)
                host_cwd = os.path.realpath(os.path.join(self.workspace, rel))
                if not (_inside(host_cwd, self.workspace) and os.path.isdir(host_cwd)):
                    return ExecResult(
                        exit_code=2,
                        stdout="",
                        stderr=f"agentgym-sandbox: no directory {rel} in the workspace\n",
                    )
                inner_cwd = inner + host_cwd[len(self.workspace) :]
            tmp_inner = "/tmp" if self.isolation == "bwrap" else self._tmp
            environment = {
                "PATH": _SYSTEM_PATH,
                "HOME": inner,
                "TMPDIR": tmp_inner,
                "LANG": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1",
                **extra,
            }
            return self._spawn(argv, inner, inner_cwd, seconds, data, environment, host_cwd)

    def write_files(self, files: Mapping[str, str | bytes]) -> None:
        with self._lock:
            self._check_open()
            plan = []
            for path, content in files.items():
                rel = check_relative_path(path)
                real = self._resolve(rel)
                if os.path.isdir(real) or real == self.workspace:
                    raise SandboxPathError(f"Sandbox path {rel!r} is a directory, not a file.")
                plan.append((rel, real, to_bytes(content, path)))
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

    def read_bytes(self, path: str) -> bytes:
        with self._lock:
            self._check_open()
            rel = check_relative_path(path)
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
        """Empty the workspace and the private tmp (commands leave no processes behind)."""
        with self._lock:
            self._check_open()
            for d in (self.workspace, self._tmp):
                for entry in os.listdir(d):
                    _rmtree(os.path.join(d, entry))

    def healthy(self) -> bool:
        return not self._closed and os.path.isdir(self.workspace)

    def describe(self) -> str:
        return f"{super().describe()}; workspace {self.workspace}"

    # -- internals --------------------------------------------------------------------------
    def _resolve(self, rel: str) -> str:
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

    def _rlimits(self, seconds: float) -> list[tuple[int, int]]:
        lim = self.limits
        cpu = lim.cpu_seconds or math.ceil(seconds) + 5
        uid = self._uid if self._uid is not None else os.getuid()
        nproc = _user_tasks(uid) + lim.pids
        mib = 1024 * 1024
        return [
            (resource.RLIMIT_AS, lim.memory_mb * mib),
            (resource.RLIMIT_CPU, cpu),
            (resource.RLIMIT_NOFILE, lim.nofile),
            (resource.RLIMIT_FSIZE, lim.workspace_mb * mib),
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_NPROC, nproc),
        ]

    def _spawn(
        self,
        argv: list[str],
        inner: str,
        inner_cwd: str,
        seconds: float,
        stdin: bytes | None,
        env: dict[str, str],
        cwd: str,
    ) -> ExecResult:
        limits = self._rlimits(seconds)
        setrlimit = resource.setrlimit

        def in_child() -> None:  # runs between fork and exec: no imports, no locks
            for which, value in limits:
                with contextlib.suppress(ValueError, OSError):
                    setrlimit(which, (value, value))

        out = CappedBuffer(self.limits.output_limit)
        err = CappedBuffer(self.limits.output_limit)
        # bwrap reports the pid of its namespace's init on this pipe
        info_r, info_w = os.pipe() if self.isolation == "bwrap" else (-1, -1)
        full = _prefix(
            self.isolation,
            self.workspace,
            self._tmp,
            inner,
            inner_cwd,
            info_fd=info_w if info_w >= 0 else None,
        )
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                [*full, *argv],
                pass_fds=(info_w,) if info_w >= 0 else (),
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=env,
                start_new_session=True,
                preexec_fn=in_child,
                user=self._uid,
                group=self._uid,
                extra_groups=[] if self._uid is not None else None,
                close_fds=True,
            )
        except FileNotFoundError as e:
            return ExecResult(
                exit_code=127,
                stdout="",
                stderr=f"agentgym-sandbox: command not found: {e.filename}\n",
                duration=time.monotonic() - start,
            )
        finally:
            if info_w >= 0:
                os.close(info_w)
        ns_init = None
        if info_r >= 0:
            init_pid = _read_child_pid(info_r)
            if init_pid is not None:
                ns_init = (init_pid, process_start_ticks(init_pid))
        timed_out = self._pump(proc, stdin, out, err, start + seconds, ns_init)
        returncode = proc.wait()
        return ExecResult(
            exit_code=137 if timed_out else exit_code_from_status(returncode),
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            duration=time.monotonic() - start,
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
        )

    def _pump(
        self,
        proc: subprocess.Popen[bytes],
        stdin: bytes | None,
        out: CappedBuffer,
        err: CappedBuffer,
        deadline: float,
        ns_init: tuple[int, str | None] | None,
    ) -> bool:
        """Feed stdin, drain stdout/stderr, kill at the deadline or once the command has
        exited (leftover background processes). Returns whether it timed out."""
        sel = selectors.DefaultSelector()
        assert proc.stdout is not None and proc.stderr is not None
        sinks = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        for fd in sinks:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        pending = memoryview(stdin) if stdin else None
        stdin_fd = -1
        if proc.stdin is not None:
            if pending:
                stdin_fd = proc.stdin.fileno()
                os.set_blocking(stdin_fd, False)
                sel.register(stdin_fd, selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
        timed_out = False
        killer: _Killer | None = None
        try:
            while True:
                now = time.monotonic()
                if killer is None and now >= deadline:
                    timed_out = True
                    killer = _Killer(proc.pid, self.isolation, ns_init, kill=True)
                elif killer is None and _exited(proc.pid):
                    # the command is done: whatever it left running goes too
                    killer = _Killer(proc.pid, self.isolation, ns_init, kill=False)
                if killer is not None:
                    killer.step()
                    if not sel.get_map() or killer.gave_up():
                        break  # done (or an escaped process holds the pipes: stop reading)
                elif not sel.get_map():
                    # output closed but the command still runs: wait for it or the deadline
                    time.sleep(max(0.0, min(0.01, deadline - now)))
                    continue
                wait = 0.05 if killer is not None else min(0.05, deadline - now)
                for key, _ in sel.select(max(wait, 0.0)):
                    fd = key.fd
                    if fd == stdin_fd:
                        try:
                            n = os.write(fd, pending[: 64 * 1024])
                            pending = pending[n:]
                        except BlockingIOError:
                            continue
                        except OSError:  # the command closed its stdin
                            pending = None
                        if not pending:
                            sel.unregister(fd)
                            proc.stdin.close()  # type: ignore[union-attr]
                            stdin_fd = -1
                        continue
                    try:
                        data = os.read(fd, 256 * 1024)
                    except BlockingIOError:
                        continue
                    if data:
                        sinks[fd].feed(data)
                    else:
                        sel.unregister(fd)
        finally:
            sel.close()
            for f in (proc.stdin, proc.stdout, proc.stderr):
                if f is not None:
                    with contextlib.suppress(OSError):
                        f.close()
            if killer is None:
                killer = _Killer(proc.pid, self.isolation, ns_init, kill=True)
            killer.finish()
        return timed_out


class _Killer:
    """Kills what a run started, in an order that leaves no zombie behind.

    With bwrap and unshare the wrapper's child is the init of a new pid namespace: it is
    killed first (the kernel then kills everything in the namespace) and the wrapper,
    still alive, reaps it and exits; only then is the whole process group killed. Killing
    the wrapper first would orphan its child to the host's init, which may not reap it.
    At the rlimits level the process group is killed at once.
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
        _kill_group(self.pid)

    def step(self) -> None:
        if not self.group_killed and (_exited(self.pid) or time.monotonic() - self.started > 1.0):
            self._kill_group()

    def gave_up(self) -> bool:
        return time.monotonic() - self.started > 6.0

    def finish(self) -> None:
        """Make sure the wrapper is dead (the caller's ``wait`` reaps it) and that every
        namespace init killed here has finished exiting, which is when the kernel has
        killed the rest of its namespace."""
        end = time.monotonic() + 2.0
        while not self.group_killed and not _exited(self.pid) and time.monotonic() < end:
            time.sleep(0.005)
        if not self.group_killed:
            self._kill_group()
        for child in self.waiting:
            while not _dead(child) and time.monotonic() < end:
                time.sleep(0.005)


def _read_child_pid(fd: int) -> int | None:
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


def _exited(pid: int) -> bool:
    """Whether child ``pid`` has exited, without reaping it (its group id stays reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


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
