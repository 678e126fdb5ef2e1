"""Environment work in Ray actors: :class:`RayEnvWorkers`.

A rollout's policy calls stay in the driver (the trainer's batching engine lives there);
what an environment does per step (``make``, ``reset``, ``step``: generating tasks,
grading, running sandboxes and hidden tests) can move into ``N`` Ray actors, on this
machine or on a cluster, so that it neither competes with the driver for its CPU nor
is limited to one machine::

    workers = RayEnvWorkers(4)                    # starts a local Ray
    workers = RayEnvWorkers(4, address="head:6379")  # joins a running cluster
    episodes = rollout("agentgym/BalancedMath-v0", policy, num_tasks=64, env_host=workers)
    workers.close()

What runs where:

* **Driver** (this process): the event loop, the policy, episode bookkeeping, sampling
  seeds, JSONL output, callbacks. It awaits actor calls (Ray ``ObjectRef``\\ s are
  awaitable), so it never blocks on an environment.
* **Actors** (``num_workers`` processes, ``max_concurrency`` threads each): env
  instances, made from the env id (or factory) and kwargs, cached per (env, kwargs) and
  reused across episodes and across rollouts until :meth:`RayEnvWorkers.close`. An
  episode is pinned to one instance for its whole life; episodes are spread over the
  actors. Env-bound policies (objects with ``for_env(env)``, like the oracle) are bound
  and called inside the actor, because they read the env's state.
* Time bounds are the env's own and hold inside actors unchanged: math grading runs in
  forked worker processes under a wall-clock deadline, sandbox commands under their
  timeouts (both are per-process machinery that each actor starts for itself).

Ray is imported only when a :class:`RayEnvWorkers` is made, so ``import agentgym`` stays
light. A local Ray keeps its files (sockets, logs, spilled objects) under
:func:`default_temp_dir`, outside the virtual environment and the source tree; see
``docs/ray.md``.

Modules, one job each:

* :mod:`~agentgym.workers.driver` -- :class:`RayEnvWorkers` (start the actors, lease
  envs, send calls, close) and :class:`RemoteEnv`, in the driver;
* :mod:`~agentgym.workers.actor` -- the actor: env instances by handle, bound policies;
* :mod:`~agentgym.workers.cluster` -- starting or joining Ray, the temp dir checks;
* :mod:`~agentgym.workers.errors` -- :class:`EnvWorkerError` and the error reports the
  actor sends back.
"""

from __future__ import annotations

from agentgym.workers.actor import env_id_of
from agentgym.workers.cluster import (
    CONNECT_TIMEOUT_S,
    DEFAULT_OBJECT_STORE_BYTES,
    NAMESPACE,
    TMPDIR_ENV,
    check_temp_dir,
    default_temp_dir,
)
from agentgym.workers.driver import (
    CLOSE_TIMEOUT_S,
    EnvSource,
    RayEnvWorkers,
    RemoteEnv,
    config_index,
)
from agentgym.workers.errors import EnvWorkerError

__all__ = [
    "CLOSE_TIMEOUT_S",
    "CONNECT_TIMEOUT_S",
    "DEFAULT_OBJECT_STORE_BYTES",
    "NAMESPACE",
    "TMPDIR_ENV",
    "EnvSource",
    "EnvWorkerError",
    "RayEnvWorkers",
    "RemoteEnv",
    "check_temp_dir",
    "config_index",
    "default_temp_dir",
    "env_id_of",
]
