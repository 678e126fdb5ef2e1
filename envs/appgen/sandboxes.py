"""Shared sandbox pools for AppGen environments.

Every AppGen env in a process draws its sandboxes from one :class:`SandboxPool` per
(backend, limits), so the concurrent envs of a rollout share warm sandboxes instead of
each starting its own. An episode holds at most one sandbox at a time: its workspace
while it plays, then (after the project files were read back and the workspace released)
a fresh one for grading. Holding one at a time means a full pool can never deadlock.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from agentgym import ConfigError

BACKENDS = ("auto", "docker", "local")
#: Sandboxes per pool (handed out plus idle). Raise it for more concurrent episodes.
DEFAULT_POOL_SIZE = 8

_pools: dict[tuple[Any, ...], Any] = {}
_resolved: dict[str, str] = {}
_lock = threading.Lock()


def check_backend(name: str) -> str:
    if name not in BACKENDS:
        from agentgym import did_you_mean

        raise ConfigError(
            f"Unknown sandbox backend {name!r}.{did_you_mean(name, BACKENDS)} "
            f"AppGen's sandbox argument must be one of {', '.join(BACKENDS)}."
        )
    return name


def resolve_backend(name: str) -> str:
    """``auto`` -> ``docker`` when its engine and image are usable, else ``local``."""
    check_backend(name)
    if name != "auto":
        return name
    with _lock:
        if "auto" not in _resolved:
            from agentgym.sandbox import docker_available

            _resolved["auto"] = "docker" if docker_available() is None else "local"
        return _resolved["auto"]


def get_pool(backend: str, limits: dict[str, Any], size: int = DEFAULT_POOL_SIZE) -> Any:
    """The shared pool for ``backend`` (resolved) and ``limits`` (SandboxLimits fields)."""
    from agentgym.sandbox import SandboxPool

    concrete = resolve_backend(backend)
    key = (concrete, tuple(sorted(limits.items())), size)
    with _lock:
        pool = _pools.get(key)
        if pool is None or pool.closed:
            pool = SandboxPool(size=size, backend=concrete, warm=0, **limits)
            _pools[key] = pool
        return pool


def close_pools() -> None:
    """Close every shared pool (and its sandboxes). Runs at interpreter exit."""
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        try:
            pool.close()
        except RuntimeError:  # at interpreter exit the pool's thread pool may be gone
            for sb in [*getattr(pool, "_idle", []), *getattr(pool, "_busy", {}).values()]:
                try:
                    sb.close()
                except Exception:
                    pass


atexit.register(close_pools)
