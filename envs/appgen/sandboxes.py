"""Shared sandbox pools for AppGen environments: one pool per (role, backend, limits, size).

Every AppGen env in a process draws its sandboxes from shared :class:`SandboxPool` objects, so
the concurrent envs of a rollout share warm sandboxes instead of each starting its own.
There are two roles, each with pools of its own, so that no container holds both an
agent and a grading:

* ``"workspace"``: where an episode's agent plays. Never reused (``reuse=False``): each
  episode gets a container no one held before, started in the background when the
  previous holder gave its own back. An agent reads whatever a container shows it, and
  some state survives any reset (the container's counters of processes started, memory
  and CPU used, the next pid), so only a fresh container is sure to show it nothing of
  another episode.
* ``"grading"``: where a finished project is graded. Reused, with the sandbox's measured
  reset between gradings (every process, file and IPC object of every user gone, the
  container back to its idle memory, else replaced). No agent ever enters one: what a
  graded project leaves, the next grading's project could at most read, and that
  project's code was written before the grading started.

An episode holds at most one sandbox at a time: its workspace while it plays, then (after
the project files were read back and the workspace released) a grading sandbox.

Which backend ``"auto"`` means is decided by :func:`agentgym.sandbox.resolve_backend`;
this module keeps the cache of pools, and refuses to grade on the local backend unless
the caller opted in (:func:`grading_backend`): the local backend runs the grader and the
project as one user, so a project could rewrite the grader (see
:mod:`agentgym.envs.appgen.grading`).
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from agentgym import ConfigError
from agentgym.sandbox import SandboxPool, check_backend, docker_available, resolve_backend

__all__ = [
    "DEFAULT_POOL_SIZE",
    "GRADING",
    "UNSAFE_LOCAL_OPT_IN",
    "WORKSPACE",
    "check_sandbox_backend",
    "close_pools",
    "get_pool",
    "grading_backend",
    "local_refused",
]

#: the argument that lets AppGen grade on the local backend (its name says what it costs)
UNSAFE_LOCAL_OPT_IN = "unsafe_local_grading"

#: Sandboxes per pool (handed out plus idle). Raise it for more concurrent episodes.
DEFAULT_POOL_SIZE = 8
#: the roles of AppGen's pools: agents' workspaces (never reused) and gradings (reset)
WORKSPACE, GRADING = "workspace", "grading"
_REUSE = {WORKSPACE: False, GRADING: True}

_pools: dict[tuple[Any, ...], SandboxPool] = {}
_lock = threading.Lock()


def check_sandbox_backend(name: str) -> str:
    """``name`` if it names a sandbox backend, else a ConfigError that names AppGen's argument."""
    return check_backend(name, argument="AppGen's sandbox argument")


def local_refused(asked: str, why_not_docker: str | None = None) -> ConfigError:
    """The error for grading on the local backend without the opt-in: what it would cost,
    how to get Docker, and how to opt in anyway."""
    if asked == "auto":
        head = (
            "AppGen's sandbox='auto' found no usable Docker backend"
            + (f" ({why_not_docker})" if why_not_docker else "")
            + " and will not fall back to the local backend on its own."
        )
    else:
        head = "AppGen's sandbox='local' was asked for without the unsafe opt-in."
    return ConfigError(
        f"{head} The local backend runs the grader and the project under one user, so a "
        "project can rewrite the grader and score 1.0 without doing the task. Get Docker: "
        "`bash scripts/ensure_docker.sh` (installs and starts the engine, builds the "
        "image), then `agentgym sandbox doctor` to check it. To grade without isolation "
        f"anyway (trusted code only), pass {UNSAFE_LOCAL_OPT_IN}=True (`--env-arg "
        f"{UNSAFE_LOCAL_OPT_IN}=true`); episodes then carry sandbox='local' and "
        "benchmark results are marked as graded without isolation."
    )


def grading_backend(backend: str, unsafe_local: bool) -> str:
    """The concrete backend AppGen grades on for ``backend``; a :class:`ConfigError`
    (:func:`local_refused`) when that is the local backend and ``unsafe_local`` is not set."""
    concrete = resolve_backend(backend, remember=True)
    if concrete == "local" and not unsafe_local:
        raise local_refused(backend, docker_available() if backend == "auto" else None)
    return concrete


def get_pool(
    backend: str, limits: dict[str, Any], size: int = DEFAULT_POOL_SIZE, role: str = WORKSPACE
) -> SandboxPool:
    """The shared pool of ``role`` (:data:`WORKSPACE` or :data:`GRADING`) for ``backend``
    (resolved) and ``limits`` (SandboxLimits fields)."""
    reuse = _REUSE[role]
    concrete = resolve_backend(backend, remember=True)
    key = (role, concrete, tuple(sorted(limits.items())), size)
    with _lock:
        pool = _pools.get(key)
        if pool is None or pool.closed:
            pool = SandboxPool(size=size, backend=concrete, warm=0, reuse=reuse, **limits)
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
