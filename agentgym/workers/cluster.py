"""Starting or joining Ray for the env workers: addresses, the local Ray and its temp dir.

:func:`connect` decides, in this order: this process's Ray connection if there is one,
the cluster at ``address`` (or ``$RAY_ADDRESS``), else a local Ray started here under
:func:`default_temp_dir`. :func:`shut_down_local` undoes the last case. Ray is imported
inside these functions only, so ``import agentgym`` stays light.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError
from agentgym.workers.reaper import start_reaper, stop_reaper

__all__ = [
    "CONNECT_TIMEOUT_S",
    "DEFAULT_OBJECT_STORE_BYTES",
    "NAMESPACE",
    "TMPDIR_ENV",
    "RayConnection",
    "check_reachable",
    "check_temp_dir",
    "connect",
    "default_temp_dir",
    "shut_down_local",
]

#: Environment variable that moves the Ray temp dir of a local Ray started here.
TMPDIR_ENV = "AGENTGYM_RAY_TMPDIR"
#: Ray namespace of the actors (and of a Ray started here).
NAMESPACE = "agentgym"
#: Object store of a local Ray started here: env traffic (messages, info dicts) is small.
DEFAULT_OBJECT_STORE_BYTES = 256 * 1024**2
#: Seconds allowed for a TCP connection to a cluster address before it counts as down.
CONNECT_TIMEOUT_S = 5.0

# Longest path an AF_UNIX socket may have on Linux (108 bytes with the terminating NUL),
# and what Ray appends to its temp dir for its longest socket (pid up to 7 digits).
_SOCKET_PATH_MAX = 107
_SESSION_SOCKET_TAIL = "/session_2000-01-01_00-00-00_000000_4194304/sockets/plasma_store"

#: The folder that holds pyproject.toml when agentgym runs from a source checkout
#: (this file is agentgym/workers/cluster.py).
_SOURCE_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class RayConnection:
    """What :func:`connect` did.

    Attributes:
        started_ray: a local Ray was started here (and is shut down at close).
        temp_dir: that Ray's temp dir (``None`` when joined).
        session_dir: its session dir (logs, sockets), when Ray tells.
        reaper: the process that ends that Ray and removes its session dir if this
            process dies without closing it (:mod:`~agentgym.workers.reaper`).
    """

    started_ray: bool = False
    temp_dir: str | None = None
    session_dir: str | None = None
    reaper: Any = None  # (process, pipe end) of the reaper watching a local Ray


def default_temp_dir() -> str:
    """Where a local Ray started by agentgym keeps its files.

    ``$AGENTGYM_RAY_TMPDIR`` when set, else ``<system temp dir>/agentgym-ray`` (for
    example ``/tmp/agentgym-ray``): never inside the virtual environment or the repo.
    """
    return os.environ.get(TMPDIR_ENV) or os.path.join(tempfile.gettempdir(), "agentgym-ray")


def _forbidden_roots() -> list[tuple[Path, str]]:
    roots = [(Path(sys.prefix).resolve(), "the Python environment (sys.prefix)")]
    if (_SOURCE_ROOT / "pyproject.toml").is_file():
        roots.append((_SOURCE_ROOT, "the agentgym source tree"))
    return roots


def check_temp_dir(path: str | os.PathLike[str]) -> str:
    """Validate a Ray temp dir and return it as an absolute path.

    Raises:
        ConfigError: the dir is inside the virtual environment or the source tree (Ray
            writes logs, sockets and spilled objects there), or it is too long for the
            Unix socket paths Ray makes under it.
    """
    p = Path(os.path.expanduser(os.fspath(path))).resolve()
    for root, what in _forbidden_roots():
        if p == root or root in p.parents:
            raise ConfigError(
                f"The Ray temp dir {p} is inside {what} ({root}). Ray writes logs, sockets "
                f"and spilled objects there; pick a dir outside it, e.g. set {TMPDIR_ENV}="
                f"{os.path.join(tempfile.gettempdir(), 'agentgym-ray')}."
            )
    longest = len(str(p)) + len(_SESSION_SOCKET_TAIL)
    if longest > _SOCKET_PATH_MAX:
        limit = _SOCKET_PATH_MAX - len(_SESSION_SOCKET_TAIL)
        raise ConfigError(
            f"The Ray temp dir {p} is {len(str(p))} characters long; Ray's socket paths "
            f"under it would exceed the {_SOCKET_PATH_MAX}-character limit of Unix sockets. "
            f"Use a dir of at most {limit} characters, e.g. set {TMPDIR_ENV}=/tmp/agentgym-ray."
        )
    return str(p)


def check_reachable(address: str) -> None:
    """Fail fast (seconds, not Ray's minutes of retries) when nothing listens at address."""
    if address in ("auto", "local"):
        return
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(
            f"ray_address {address!r} is not of the form host:port (e.g. '10.0.0.5:6379', "
            "the address `ray start --head` prints) or 'ray://host:10001' or 'auto'."
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise ConfigError(
            f"No Ray cluster answers at {address} ({e.strerror or e}). Start one on the head "
            "node with `ray start --head --port=6379` and pass the address it prints "
            "(host:6379), or leave ray_address empty to start a local Ray for this run."
        ) from None


def connect(
    num_workers: int,
    *,
    address: str | None,
    temp_dir: str | os.PathLike[str] | None,
    num_cpus: int | None,
    cpus_per_worker: float,
    object_store_memory: int | None,
    log_to_driver: bool,
    keep_logs: bool = False,
) -> RayConnection:
    """Make sure this process is connected to a Ray that can place the workers.

    Arguments are those of :class:`~agentgym.workers.RayEnvWorkers` (``address`` already
    ``None`` for "start a local one"). An explicit ``temp_dir`` is checked even when it
    ends up unused, so that a bad value shows at once.

    Raises:
        ConfigError: a bad temp dir, an unreachable address, a cluster that cannot be
            joined, or fewer local CPUs than the workers reserve.
    """
    explicit_temp = check_temp_dir(temp_dir) if temp_dir is not None else None
    if address is None and os.environ.get("RAY_ADDRESS"):
        address = os.environ["RAY_ADDRESS"]
    if address is not None:
        check_reachable(address)

    import ray

    if ray.is_initialized():
        return RayConnection()  # use this process's connection (and leave it up at close)
    if address is not None:
        _join(ray, address, log_to_driver)
        return RayConnection()
    needed = math.ceil(num_workers * cpus_per_worker)
    cpus = num_cpus if num_cpus is not None else max(os.cpu_count() or 1, needed)
    if cpus < needed:
        raise ConfigError(
            f"{num_workers} workers x cpus_per_worker={cpus_per_worker} need {needed} "
            f"CPUs but the local Ray gets num_cpus={cpus}. Lower cpus_per_worker (0 "
            "lets workers share CPUs) or raise num_cpus."
        )
    wanted = explicit_temp or check_temp_dir(default_temp_dir())
    return _start_local(ray, wanted, cpus, object_store_memory, log_to_driver, keep_logs)


def shut_down_local(connection: RayConnection, *, keep_logs: bool) -> None:
    """Shut down a Ray that :func:`connect` started, and remove its session dir unless
    ``keep_logs``. A Ray it joined is left alone."""
    if not connection.started_ray:
        return
    import ray

    ray.shutdown()
    if connection.session_dir and not keep_logs:
        shutil.rmtree(connection.session_dir, ignore_errors=True)
    if connection.reaper is not None:
        stop_reaper(*connection.reaper)


def _join(ray: Any, address: str, log_to_driver: bool) -> None:
    try:
        ray.init(
            address=address,
            namespace=NAMESPACE,
            log_to_driver=log_to_driver,
            logging_level=logging.WARNING,
        )
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise ConfigError(
            f"Could not join the Ray cluster at {address}: {e}. Check that `ray status "
            f"--address={address}` works from this machine (same Ray and Python "
            "versions), or leave ray_address empty to start a local Ray."
        ) from e


def _start_local(
    ray: Any,
    temp_dir: str,
    num_cpus: int,
    object_store_memory: int | None,
    log_to_driver: bool,
    keep_logs: bool = False,
) -> RayConnection:
    os.makedirs(temp_dir, exist_ok=True)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(
        address="local",
        num_cpus=num_cpus,
        object_store_memory=object_store_memory or DEFAULT_OBJECT_STORE_BYTES,
        include_dashboard=False,
        log_to_driver=log_to_driver,
        logging_level=logging.WARNING,
        namespace=NAMESPACE,
        _temp_dir=temp_dir,
    )
    try:  # no public API gives the session dir
        session_dir = ray._private.worker._global_node.get_session_dir_path()
    except Exception:
        session_dir = None
    reaper = None
    if session_dir and sys.platform.startswith("linux"):
        try:  # a kill -9 of this process must not leave Ray's agents and files behind
            reaper = start_reaper(session_dir, keep_logs=keep_logs)
        except OSError:
            reaper = None
    return RayConnection(
        started_ray=True, temp_dir=temp_dir, session_dir=session_dir, reaper=reaper
    )
