"""Shared sandbox pools for AppGen environments: one pool per (backend, limits, size).

Every AppGen env in a process draws its sandboxes from one :class:`SandboxPool` per
(backend, limits), so the concurrent envs of a rollout share warm sandboxes instead of
each starting its own. An episode holds at most one sandbox at a time: its workspace
while it plays, then (after the project files were read back and the workspace released)
a fresh one for grading. Holding one at a time means a full pool can never deadlock.

Which backend ``"auto"`` means is decided by :func:`agentgym.sandbox.resolve_backend`;
this module only keeps the cache of pools.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from agentgym.sandbox import SandboxPool, check_backend, resolve_backend

__all__ = ["DEFAULT_POOL_SIZE", "check_sandbox_backend", "close_pools", "get_pool"]

#: Sandboxes per pool (handed out plus idle). Raise it for more concurrent episodes.
DEFAULT_POOL_SIZE = 8

_pools: dict[tuple[Any, ...], SandboxPool] = {}
_lock = threading.Lock()


def check_sandbox_backend(name: str) -> str:
    """``name`` if it names a sandbox backend, else a ConfigError that names AppGen's argument."""
    return check_backend(name, argument="AppGen's sandbox argument")


def get_pool(backend: str, limits: dict[str, Any], size: int = DEFAULT_POOL_SIZE) -> SandboxPool:
    """The shared pool for ``backend`` (resolved) and ``limits`` (SandboxLimits fields)."""
    concrete = resolve_backend(backend, remember=True)
    key = (concrete, tuple(sorted(limits.items())), size)
    with _lock:
        pool = _pools.get(key)
        if pool is None or pool.closed:
            pool = SandboxPool(size=size, backend=concrete, warm=0, **limits)
            _pools[key] = pool
        return pool


def close_pools() -> None:
    """Close every shared pool (and its sandboxes). Runs at interpreter exit.

    :meth:`SandboxPool.close` copes with interpreter exit itself (no new threads then:
    it closes the sandboxes one at a time).
    """
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


atexit.register(close_pools)
