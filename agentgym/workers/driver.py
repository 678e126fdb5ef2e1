"""The driver side of the Ray env workers: :class:`RayEnvWorkers` and :class:`RemoteEnv`.

:class:`RayEnvWorkers` starts the actors (after :func:`~agentgym.workers.cluster.connect`
has found or started a Ray), leases env instances to episodes (a cached idle one of the
same configuration, else a new one on the least busy actor), sends every call and turns
a worker's error report back into an exception, and closes it all down.
:class:`RemoteEnv` is one leased instance with Gymnasium's methods, awaited.
"""

from __future__ import annotations

import os
import sys
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from agentgym.errors import ConfigError, EnvStateError
from agentgym.types import Completion, Message, SamplingParams
from agentgym.workers.actor import BINDER_CACHE, remote_host
from agentgym.workers.cluster import RayConnection, connect, shut_down_local
from agentgym.workers.errors import EnvWorkerError, error_from_report

__all__ = ["CLOSE_TIMEOUT_S", "EnvSource", "RayEnvWorkers", "RemoteEnv", "config_index"]

#: Seconds ``close()`` waits for actors to close their envs before killing them.
CLOSE_TIMEOUT_S = 30.0

#: What an episode's env is made from: a registered id or a zero-argument factory.
EnvSource = str | Callable[[], gym.Env]


def config_index(
    configs: list[tuple[Any, dict[str, Any]]], env: Any, kwargs: dict[str, Any]
) -> int:
    """Index of the env configuration ``(env, kwargs)`` in ``configs``, appended if new.

    Configurations are compared by equality (kwargs may hold lists or callables, which
    do not hash); envs made from equal configurations are interchangeable.
    """
    for i, (src, kw) in enumerate(configs):
        try:
            if (src is env or src == env) and kw == kwargs:
                return i
        except Exception:  # objects whose == does not give a bool
            continue
    configs.append((env, kwargs))
    return len(configs) - 1


class RemoteEnv:
    """One env instance inside a Ray env worker, leased to one episode at a time.

    Get one from :meth:`RayEnvWorkers.acquire`, give it back with
    :meth:`RayEnvWorkers.release`. The methods mirror Gymnasium's and are awaited.

    Attributes:
        env_id: the id the env reports (its spec id).
        worker: index of the actor that holds it.
    """

    def __init__(
        self,
        workers: RayEnvWorkers,
        worker: int,
        handle: int,
        env_id: str,
        key: int,
        generation: int = 0,
    ):
        self.workers = workers
        self.worker = worker
        self.handle = handle
        self.env_id = env_id
        self.key = key
        self.generation = generation  # which actor of slot ``worker`` holds it
        self._final_metrics: dict[str, Any] | None = None

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """``env.reset(seed=..., options=...)`` in the worker."""
        self._final_metrics = None
        obs, info = await self._call("reset", self.handle, seed, options)
        return obs, info

    async def step(self, action: Any) -> tuple[list[Message], Any, bool, bool, dict[str, Any]]:
        """``env.step(action)`` in the worker."""
        obs, reward, terminated, truncated, info, metrics = await self._call(
            "step", self.handle, action
        )
        if metrics is not None:
            self._final_metrics = metrics
        return obs, reward, terminated, truncated, info

    async def episode_metrics(self) -> dict[str, Any]:
        """``env.unwrapped.episode_metrics`` (read at the last step, when there was one)."""
        if self._final_metrics is not None:
            return dict(self._final_metrics)
        return await self._call("episode_metrics", self.handle)

    async def render(self) -> Any:
        """``env.render()`` in the worker."""
        return await self._call("render", self.handle)

    async def bind_policy(self, policy: Any) -> Any:
        """Bind an env-bound policy (one with ``for_env(env)``) to this env, in the worker.

        Returns a driver-side policy whose calls run the bound policy in the worker. The
        binder is sent to each worker once (pickled) and kept there: state it changes in
        ``for_env`` (like :class:`~agentgym.policies.RandomPolicy`'s counter) stays per
        worker.
        """
        token, payload = self.workers._binder_payload(policy)
        name = await self._call("bind", self.handle, token, payload)
        return _WorkerBoundPolicy(self, name)

    async def _call(self, method: str, *args: Any) -> Any:
        return await self.workers._call(self.worker, method, args, env_id=self.env_id)

    def __repr__(self) -> str:
        return f"RemoteEnv({self.env_id!r}, worker={self.worker}, handle={self.handle})"


class _WorkerBoundPolicy:
    """A policy whose calls run an env-bound policy inside the env's worker."""

    def __init__(self, env: RemoteEnv, name: str) -> None:
        self.env = env
        self.name = name

    async def __call__(self, messages: Sequence[Message], sampling: SamplingParams) -> Completion:
        return await self.env._call("act", self.env.handle, list(messages), sampling)


class RayEnvWorkers:
    """``num_workers`` Ray actors that hold environment instances for rollouts.

    Pass it to :func:`agentgym.rollout` / :func:`~agentgym.rollouts.rollout_async` as
    ``env_host=``; make it once (start-up costs seconds), use it for every rollout, and
    :meth:`close` it at the end (also a context manager). See :mod:`agentgym.workers` for
    what runs where.

    Connecting: with ``address`` it joins that cluster (``host:port`` as printed by
    ``ray start --head``, ``ray://host:port`` for Ray Client, or ``auto``); an address
    where nothing listens fails within seconds. Without one it uses this process's Ray
    connection if there is one, joins ``$RAY_ADDRESS`` if that is set, and otherwise
    starts a local Ray, which :meth:`close` shuts down again. The cluster's Python must
    have agentgym (and whatever the envs need) installed.

    Args:
        num_workers: actors to start (processes; each steps many envs on threads).
        address: Ray cluster to join (see above).
        temp_dir: temp dir of a local Ray started here (default
            :func:`~agentgym.workers.default_temp_dir`; checked to lie outside the
            virtual environment and the repo, and short enough for Ray's socket paths).
        num_cpus: CPUs of a local Ray started here (default: this machine's, at least
            what the workers reserve).
        cpus_per_worker: CPUs each actor reserves in Ray's scheduler (the envs' grading
            processes and sandboxes come on top). 0 lets workers share CPUs.
        max_concurrency: threads per actor: env calls one actor runs at the same time.
        object_store_memory: object store bytes of a local Ray started here (default
            256 MiB).
        runtime_env: Ray runtime env of the actors (e.g. ``{"pip": [...]}`` on a cluster).
        start_timeout_s: how long the actors may take to be placed and start.
        keep_logs: keep the session dir (logs) of a local Ray started here after
            :meth:`close` (default: removed).
        log_to_driver: print the actors' stdout/stderr here (default: only in the log
            files of the session dir).

    Raises:
        ConfigError: bad arguments, an unreachable address, or actors that could not start.
    """

    def __init__(
        self,
        num_workers: int = 1,
        *,
        address: str | None = None,
        temp_dir: str | os.PathLike[str] | None = None,
        num_cpus: int | None = None,
        cpus_per_worker: float = 1.0,
        max_concurrency: int = 16,
        object_store_memory: int | None = None,
        runtime_env: dict[str, Any] | None = None,
        start_timeout_s: float = 120.0,
        keep_logs: bool = False,
        log_to_driver: bool = False,
    ) -> None:
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ConfigError(
                f"num_workers (rollout_workers) must be an int >= 1, got {num_workers!r}."
            )
        if not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be an int >= 1, got {max_concurrency!r}.")
        if cpus_per_worker < 0:
            raise ConfigError(f"cpus_per_worker must be >= 0, got {cpus_per_worker!r}.")
        if start_timeout_s <= 0:
            raise ConfigError(f"start_timeout_s must be > 0, got {start_timeout_s!r}.")
        if address is not None and address.strip() in ("", "local"):
            address = None  # Ray's word for "start a local instance"
        self.num_workers = num_workers
        self.max_concurrency = max_concurrency
        self.keep_logs = keep_logs
        self._actors: list[Any] = []
        self._infos: list[dict[str, Any]] = []
        self._closed = False
        self._lock = threading.Lock()
        self._configs: list[tuple[Any, dict[str, Any]]] = []
        self._idle: dict[int, list[RemoteEnv]] = {}
        self._busy = [0] * num_workers
        self._count = [0] * num_workers
        self._generation = [0] * num_workers  # bumped when a dead actor is replaced
        self.replaced = 0  # actors replaced after they died (or were killed as faulty)
        self._health_refs: dict[int, Any] = {}  # worker -> its health call in flight
        self._health_last: dict[int, dict[str, Any]] = {}
        self._binders: OrderedDict[int, tuple[Any, str, bytes]] = OrderedDict()

        self._connection: RayConnection = connect(
            num_workers,
            address=address,
            temp_dir=temp_dir,
            num_cpus=num_cpus,
            cpus_per_worker=cpus_per_worker,
            object_store_memory=object_store_memory,
            log_to_driver=log_to_driver,
            keep_logs=keep_logs,
        )
        #: a local Ray was started here (``close`` shuts it down); its temp and session dirs
        self.started_ray: bool = self._connection.started_ray
        self.temp_dir: str | None = self._connection.temp_dir
        self.session_dir: str | None = self._connection.session_dir
        import ray

        try:
            self._start_actors(ray, cpus_per_worker, runtime_env, start_timeout_s)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ start-up
    def _start_actors(
        self,
        ray: Any,
        cpus_per_worker: float,
        runtime_env: dict[str, Any] | None,
        timeout_s: float,
    ) -> None:
        options: dict[str, Any] = {
            "num_cpus": cpus_per_worker,
            "max_concurrency": self.max_concurrency,
            "scheduling_strategy": "SPREAD",
            "max_restarts": 0,
        }
        if runtime_env:
            options["runtime_env"] = runtime_env
        host = remote_host().options(**options)
        driver_path = [os.path.abspath(p) for p in sys.path if p]
        self._spawn = lambda i: host.remote(i, driver_path)  # (also replaces a dead actor)
        self._actors = [self._spawn(i) for i in range(self.num_workers)]
        try:
            self._infos = ray.get([a.info.remote() for a in self._actors], timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise ConfigError(
                f"The {self.num_workers} Ray env workers did not start within {timeout_s:g}s. "
                f"Each reserves {cpus_per_worker:g} CPU; the cluster has "
                f"{ray.available_resources().get('CPU', 0):g} free. Lower rollout_workers "
                "or cpus_per_worker, or raise start_timeout_s."
            ) from None
        except ray.exceptions.RayActorError as e:
            raise ConfigError(
                f"The Ray env workers could not start: {e}. The workers' Python must have "
                "agentgym and the envs' dependencies installed (on a cluster: every node)."
            ) from None

    # ------------------------------------------------------------------ leasing
    async def acquire(self, env: EnvSource, env_kwargs: dict[str, Any] | None = None) -> RemoteEnv:
        """Lease an env instance for one episode: a cached idle one, else a new one.

        Args:
            env: a registered env id (resolved here, so an unknown id fails here, as
                ``gym.make`` does) or a zero-argument factory (pickled to the worker).
            env_kwargs: ``gym.make`` keyword arguments (ids only).

        Returns:
            A :class:`RemoteEnv`; give it back with :meth:`release`.
        """
        self._check_open()
        kwargs = dict(env_kwargs or {})
        if isinstance(env, str):
            source: Any = gym.spec(env)  # ships runtime registrations of the driver too
        elif callable(env):
            if kwargs:
                raise ConfigError(
                    "env_kwargs is only used when env is an id; bake them into the factory."
                )
            source = env
        else:
            raise ConfigError(
                f"env must be a registered env id or a zero-argument factory, got {env!r}."
            )
        key = self._config_key(env, kwargs)
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                lease = min(idle, key=lambda e: self._busy[e.worker])
                idle.remove(lease)
                self._busy[lease.worker] += 1
                return lease
            worker = min(range(self.num_workers), key=lambda i: (self._busy[i], self._count[i]))
            self._busy[worker] += 1
            self._count[worker] += 1
        label = env if isinstance(env, str) else getattr(env, "__name__", repr(env))
        generation = self._generation[worker]
        try:
            handle, env_id = await self._call(worker, "make", (source, kwargs), env_id=label)
        except BaseException:
            with self._lock:
                self._busy[worker] = max(0, self._busy[worker] - 1)
                self._count[worker] = max(0, self._count[worker] - 1)
            raise
        return RemoteEnv(self, worker, handle, env_id, key, generation)

    def release(self, env: RemoteEnv, *, discard: bool = False) -> None:
        """Give a leased env back. ``discard=True`` closes it instead of keeping it for
        reuse (after an error, or when an episode was cancelled mid-call)."""
        with self._lock:
            self._busy[env.worker] = max(0, self._busy[env.worker] - 1)
            if self._closed or env.generation != self._generation[env.worker]:
                return  # closed, or its actor died (and was replaced) with it
            if not discard:
                self._idle.setdefault(env.key, []).append(env)
                return
            self._count[env.worker] = max(0, self._count[env.worker] - 1)
        try:  # fire and forget: the worker closes it when it can
            self._actors[env.worker].close_env.remote(env.handle)
        except Exception:
            pass

    def env_counts(self) -> list[int]:
        """Env instances held by each worker (in use or idle)."""
        with self._lock:
            return list(self._count)

    def info(self) -> list[dict[str, Any]]:
        """Per worker: index, pid, host and number of envs (asks the actors)."""
        self._check_open()
        import ray

        return ray.get([a.info.remote() for a in self._actors])

    def health(self, timeout_s: float = 1.0) -> list[dict[str, Any]]:
        """Each worker's latest heartbeat (its ``health()`` record: counters of calls,
        errors, busy seconds and CPU, memory, the oldest call in flight).

        A worker that has not answered its previous health call within the time keeps
        its last record (same ``seq``), which is how a monitor sees that it hangs; one
        is asked again only once it answered. Waits at most ``timeout_s``.
        """
        self._check_open()
        import ray

        with self._lock:
            actors = list(self._actors)
        for i, actor in enumerate(actors):
            pending = self._health_refs.get(i)
            if pending is None or pending[0] is not actor:
                self._health_refs[i] = (actor, actor.health.remote())
        refs = [ref for _, ref in self._health_refs.values()]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        done = set(ready)
        for i, (_, ref) in list(self._health_refs.items()):
            if ref not in done:
                continue
            del self._health_refs[i]
            try:
                self._health_last[i] = ray.get(ref)
            except Exception:  # the actor died: its record stays until it is replaced
                continue
        return [self._health_last[i] for i in sorted(self._health_last)]

    def kill_worker(self, worker: int) -> None:
        """Kill worker ``worker`` (found faulty) and start a new one in its place.

        Its envs go with it; the episodes that were on it fail with reason
        ``worker_lost`` and, with ``retries``, are played again with the same seeds.
        """
        self._check_open()
        import ray

        with self._lock:
            actor = self._actors[worker]
        try:
            ray.kill(actor, no_restart=True)
        except Exception:
            pass
        self._replace(worker, actor)
        self._health_refs.pop(worker, None)
        self._health_last.pop(worker, None)

    def _config_key(self, env: EnvSource, kwargs: dict[str, Any]) -> int:
        with self._lock:
            return config_index(self._configs, env, kwargs)

    def _binder_payload(self, policy: Any) -> tuple[str, bytes]:
        with self._lock:
            hit = self._binders.get(id(policy))
            if hit is not None and hit[0] is policy:
                return hit[1], hit[2]
        from ray import cloudpickle

        try:
            payload = cloudpickle.dumps(policy)
        except Exception as e:
            raise ConfigError(
                f"The env-bound policy {policy!r} is bound inside the Ray env workers (its "
                f"for_env needs the env), so it must be picklable, but pickling failed: {e}. "
                "Use a policy without for_env, or run without workers."
            ) from e
        token = uuid.uuid4().hex
        with self._lock:
            self._binders[id(policy)] = (policy, token, payload)
            while len(self._binders) > BINDER_CACHE:
                self._binders.popitem(last=False)
        return token, payload

    # ------------------------------------------------------------------ calls
    def _check_open(self) -> None:
        if self._closed:
            raise EnvStateError(
                "These Ray env workers were closed; make a new RayEnvWorkers to run more rollouts."
            )

    async def _call(self, worker: int, method: str, args: tuple[Any, ...], *, env_id: str) -> Any:
        """Call ``method`` on actor ``worker`` and unwrap its ("ok" | "error", value)."""
        self._check_open()
        import ray

        actor = self._actors[worker]
        try:
            ref = getattr(actor, method).remote(*args)
        except Exception as e:  # arguments that cannot be pickled
            raise ConfigError(
                f"Could not send {method}() of {env_id} to a Ray env worker: {e}. What goes to "
                "a worker (env kwargs, env factories, actions, env-bound policies) must be "
                "picklable."
            ) from e
        try:
            status, value = await ref
        except ray.exceptions.RayActorError as e:
            self._check_open()
            self._replace(worker, actor)
            err = EnvWorkerError(
                f"Ray env worker {worker} died during {method}() of {env_id} and was "
                f"replaced; the episode can be played again on the new worker: {e}",
                env_id=env_id,
            )
            err.reason = "worker_lost"
            raise err from None
        except ray.exceptions.RayTaskError as e:  # the call itself failed outside the env
            raise EnvWorkerError(
                f"{method}() of {env_id} failed in Ray env worker {worker}:\n{e}",
                env_id=env_id,
            ) from None
        if status == "ok":
            return value
        where = self._infos[worker] if worker < len(self._infos) else {}
        raise error_from_report(value, env_id=env_id, method=method, worker=worker, where=where)

    def _replace(self, worker: int, dead: Any) -> None:
        """Start a new actor in slot ``worker`` in place of ``dead`` (once, whoever of the
        episodes that were on it notices first); the envs it held are gone with it."""
        with self._lock:
            if self._closed or self._actors[worker] is not dead:
                return  # already replaced
            self._actors[worker] = self._spawn(worker)
            self._generation[worker] += 1
            self._count[worker] = 0
            if worker < len(self._infos):
                self._infos[worker] = {"index": worker, "pid": "?", "host": "?", "replaced": True}
            for key, idle in self._idle.items():
                self._idle[key] = [e for e in idle if e.worker != worker]
            self.replaced += 1

    # ------------------------------------------------------------------ shutdown
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close every env, end the actors, and shut Ray down if this object started it.

        Idempotent. Leases still held by running rollouts fail on their next call.
        """
        if self._closed:
            return
        self._closed = True
        actors, self._actors = self._actors, []
        with self._lock:
            self._idle.clear()
            self._count = [0] * self.num_workers
        import ray

        if actors and ray.is_initialized():
            refs = [a.shutdown.remote() for a in actors]
            try:  # each actor closes its envs and exits (its atexit handlers run)
                ray.wait(refs, num_returns=len(refs), timeout=CLOSE_TIMEOUT_S)
            except Exception:
                pass
            for a in actors:
                try:
                    ray.kill(a)
                except Exception:
                    pass
        shut_down_local(self._connection, keep_logs=self.keep_logs)

    def __enter__(self) -> RayEnvWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self.num_workers} workers"
        return f"RayEnvWorkers({state}, started_ray={self.started_ray})"
