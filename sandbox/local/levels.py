"""The local backend's isolation levels: which of them work here, and the argv that wraps a
command at each (what each level isolates is in :mod:`agentgym.sandbox.local`)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

__all__ = [
    "INNER_UID",
    "INNER_WORKSPACE",
    "LEVELS",
    "NOBODY",
    "available_levels",
    "best_level",
    "drop_uid",
    "hidden_dirs",
    "nproc_helper",
    "probe",
    "wrapper_argv",
]

#: isolation levels, strongest first
LEVELS: tuple[str, ...] = ("bwrap", "unshare", "rlimits")
NOBODY = 65534
INNER_UID = 1000  # the uid commands see inside a user namespace
INNER_WORKSPACE = "/workspace"
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


def drop_uid() -> int | None:
    """The uid to run commands as: ``nobody`` when we are root, else our own (None)."""
    return NOBODY if os.geteuid() == 0 else None


def probe(level: str) -> str | None:
    """``None`` when ``level`` works here, else why not (cached per level and uid)."""
    uid = drop_uid()
    key = (level, uid)
    with _LEVEL_LOCK:
        if key in _LEVEL_CACHE:
            return _LEVEL_CACHE[key]
    why = None if level == "rlimits" else _try_tool(level, uid)
    with _LEVEL_LOCK:
        _LEVEL_CACHE[key] = why
    return why


def _try_tool(level: str, uid: int | None) -> str | None:
    """Run ``true`` under ``level``'s tool; None when that works, else why not."""
    tool = "bwrap" if level == "bwrap" else "unshare"
    if shutil.which(tool) is None:
        pkg = "bubblewrap" if tool == "bwrap" else "util-linux"
        return f"{tool} is not installed (apt-get install {pkg})"
    with tempfile.TemporaryDirectory(prefix="agentgym-probe-") as d:
        os.chmod(d, 0o755)
        argv = [*wrapper_argv(level, d, d, INNER_WORKSPACE), "true"]
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
        except (OSError, subprocess.SubprocessError) as e:
            return f"{tool} could not run: {e}"
    if p.returncode == 0:
        return None
    return (
        f"{tool} failed here ({p.stderr.decode(errors='replace').strip()[:200]}); "
        "unprivileged user namespaces may be disabled "
        "(sysctl kernel.unprivileged_userns_clone=1)"
    )


@functools.cache
def nproc_helper() -> str | None:
    """util-linux ``prlimit``, when it is installed where a namespaced command can run it.

    Inside a new user namespace the kernel counts ``RLIMIT_NPROC`` against the tasks of
    that namespace only, so a limit set there by ``prlimit`` bounds what the command
    starts, whatever else the sandbox user runs on the host. Set before the namespace
    exists, the limit would count every task of the user, and a busy host could leave
    the wrapper itself unable to fork. Without ``prlimit`` the limit is set that way, as
    at the ``rlimits`` level.
    """
    path = shutil.which("prlimit")
    if path is None:
        return None
    real = os.path.realpath(path)
    bound = ("/usr/", "/bin/", "/sbin/")
    return path if real.startswith(bound) and path.startswith(bound) else None


@functools.cache
def hidden_dirs() -> tuple[str, ...]:
    """agentgym's own installed directories that a bound system directory would show to
    commands (a wheel in ``/usr/.../site-packages``): its code and its environments' data,
    hidden tests included. bwrap mounts an empty tmpfs over each."""
    import agentgym

    here = Path(__file__).resolve()
    candidates = {Path(agentgym.__file__).resolve().parent, here.parents[2]}
    bound = ("/usr/", *(f"/{name}/" for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32")))
    bound += tuple(f"/etc/{name}/" for name in _ETC)
    return tuple(sorted(str(p) for p in candidates if str(p).startswith(bound) and p.is_dir()))


def available_levels() -> dict[str, str | None]:
    """Each level -> ``None`` if it works on this machine, else the reason it does not."""
    return {level: probe(level) for level in LEVELS}


def best_level() -> str:
    """The strongest level that works here."""
    for level in LEVELS:
        if probe(level) is None:
            return level
    return "rlimits"


def wrapper_argv(
    level: str,
    workspace: str,
    tmp: str,
    inner: str,
    cwd: str | None = None,
    info_fd: int | None = None,
    nproc: int | None = None,
) -> list[str]:
    """The argv that wraps a command at ``level`` (empty at ``rlimits``).

    Args:
        level: the isolation level.
        workspace: the workspace directory on the host.
        tmp: the sandbox's private tmp directory on the host.
        inner: where the workspace appears to the command.
        cwd: the command's working directory as it sees it (bwrap; default ``inner``).
        info_fd: a file descriptor bwrap writes its namespace init's pid to.
        nproc: the ``RLIMIT_NPROC`` to set inside the namespace (with :func:`nproc_helper`;
            the caller checks that it is there).
    """
    helper = nproc_helper()
    inside = [helper, f"--nproc={nproc}:{nproc}", "--"] if nproc and helper else []
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
        for path in hidden_dirs():
            argv += ["--tmpfs", path]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        argv += ["--bind", workspace, inner, "--bind", tmp, "/tmp"]
        argv += ["--chdir", cwd or inner, "--"]
        return argv + inside
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
            *inside,
        ]
    return []
