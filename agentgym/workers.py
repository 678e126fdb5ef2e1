"""Environment work in Ray actors: :class:`RayEnvWorkers`.

A rollout's policy calls stay in the driver (the trainer's batching engine lives there);
what an environment does per step (``make``, ``reset``, ``step``: generating tasks,
grading, running sandboxes and hidden tests) can move into ``N`` Ray actors, on this
machine or on a cluster, so that it neither competes with the driver for its CPU nor
is limited to one machine::

    workers = RayEnvWorkers(4)                    # starts a local Ray
    workers = RayEnvWorkers(4, address="head:6379")  # joins a running cluster
    episodes = rollout("agentgym/BalancedMath-v0", policy, num_tasks=64, workers=workers)
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
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import logging
import math
import os
import shutil
import socket
import sys
import tempfile
import threading
import traceback
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

from agentgym.errors import AgentGymError, ConfigError, EnvStateError
from agentgym.types import Completion, Message, SamplingParams

__all__ = [
    "TMPDIR_ENV",
    "EnvWorkerError",
    "RayEnvWorkers",
    "RemoteEnv",
    "check_temp_dir",
    "config_index",
    "default_temp_dir",
    "env_id_of",
]

#: Environment variable that moves the Ray temp dir of a local Ray started here.
TMPDIR_ENV = "AGENTGYM_RAY_TMPDIR"
#: Ray namespace of the actors (and of a Ray started here).
NAMESPACE = "agentgym"
#: Object store of a local Ray started here: env traffic (messages, info dicts) is small.
DEFAULT_OBJECT_STORE_BYTES = 256 * 1024**2
#: Seconds allowed for a TCP connection to a cluster address before it counts as down.
CONNECT_TIMEOUT_S = 5.0
#: Seconds ``close()`` waits for actors to close their envs before killing them.
CLOSE_TIMEOUT_S = 30.0

# Longest path an AF_UNIX socket may have on Linux (108 bytes with the terminating NUL),
# and what Ray appends to its temp dir for its longest socket (pid up to 7 digits).
_SOCKET_PATH_MAX = 107
_SESSION_SOCKET_TAIL = "/session_2000-01-01_00-00-00_000000_4194304/sockets/plasma_store"
_BINDER_CACHE = 8

EnvSource = str | Callable[[], gym.Env]


# ----------------------------------------------------------------------------- helpers
def env_id_of(env: gym.Env, source: Any) -> str:
    """The id an episode reports: the env's spec id, else the id asked for, else its class."""
    if env.spec is not None:
        return env.spec.id
    if isinstance(source, str):
        return source
    if isinstance(source, gym.envs.registration.EnvSpec):
        return source.id
    return type(env.unwrapped).__name__


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


def default_temp_dir() -> str:
    """Where a local Ray started by agentgym keeps its files.

    ``$AGENTGYM_RAY_TMPDIR`` when set, else ``<system temp dir>/agentgym-ray`` (for
    example ``/tmp/agentgym-ray``): never inside the virtual environment or the repo.
    """
    return os.environ.get(TMPDIR_ENV) or os.path.join(tempfile.gettempdir(), "agentgym-ray")


def _forbidden_roots() -> list[tuple[Path, str]]:
    roots = [(Path(sys.prefix).resolve(), "the Python environment (sys.prefix)")]
    source_root = Path(__file__).resolve().parents[1]
    if (source_root / "pyproject.toml").is_file():
        roots.append((source_root, "the agentgym source tree"))
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


def _check_reachable(address: str) -> None:
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


class EnvWorkerError(AgentGymError, RuntimeError):
    """An environment raised inside a Ray env worker, or the worker died.

    The message names the env, the call and the worker, and ends with the traceback as
    it happened in the worker. When the original exception type could be imported here,
    the raised object is also an instance of it, so ``except ConfigError`` (say) catches
    the same errors with and without workers (that type's own attributes are not
    restored: only the message and the traceback text travel).

    Attributes:
        env_id: the env whose call failed.
        remote_type: ``module.QualName`` of the exception raised in the worker.
        remote_traceback: its traceback text, as formatted in the worker.
    """

    def __init__(
        self,
        message: str,
        *,
        env_id: str | None = None,
        remote_type: str | None = None,
        remote_traceback: str | None = None,
    ) -> None:
        Exception.__init__(self, message)
        self.env_id = env_id
        self.remote_type = remote_type
        self.remote_traceback = remote_traceback

    def __str__(self) -> str:  # a KeyError base would otherwise quote the message
        return str(self.args[0]) if self.args else ""


_error_classes: dict[type, type] = {}


def _error_class(cause: type | None) -> type[EnvWorkerError]:
    """``EnvWorkerError``, mixed with the worker's exception type where Python allows it."""
    if (
        cause is None
        or not issubclass(cause, Exception)
        or issubclass(cause, (EnvWorkerError, StopIteration, StopAsyncIteration))
    ):
        return EnvWorkerError
    if cause not in _error_classes:
        try:
            _error_classes[cause] = type(
                f"EnvWorkerError[{cause.__name__}]", (EnvWorkerError, cause), {}
            )
        except TypeError:  # incompatible layouts or a final class
            _error_classes[cause] = EnvWorkerError
    return _error_classes[cause]


def _import_type(qualified: str) -> type | None:
    module, _, name = qualified.rpartition(".")
    try:
        obj: Any = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except Exception:
        return None
    return obj if isinstance(obj, type) else None


# ----------------------------------------------------------------------------- actor
class _EnvHost:
    """The body of one Ray env worker (a threaded actor): env instances by handle.

    Every method returns ``("ok", value)`` or ``("error", details)`` so that any env
    exception reaches the driver as text (type, message, traceback), whether or not it
    can be pickled.
    """

    def __init__(self, index: int, driver_sys_path: Sequence[str]) -> None:
        # modules importable in the driver (a script's folder, test helpers) are
        # importable here too, so env factories and entry points resolve the same way
        for p in driver_sys_path:
            if p and p not in sys.path and os.path.isdir(p):
                sys.path.append(p)
        self.index = index
        self._envs: dict[int, gym.Env] = {}
        self._bound: dict[int, Any] = {}
        self._binders: OrderedDict[str, Any] = OrderedDict()
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    @staticmethod
    def _guard(fn: Callable[[], Any]) -> tuple[str, Any]:
        try:
            return "ok", fn()
        except Exception as e:
            t = type(e)
            return "error", {
                "type": f"{t.__module__}.{t.__qualname__}",
                "message": str(e),
                "traceback": traceback.format_exc(),
            }

    def _env(self, handle: int) -> gym.Env:
        env = self._envs.get(handle)
        if env is None:
            raise EnvStateError(f"Env handle {handle} is not open in Ray env worker {self.index}.")
        return env

    def info(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "envs": len(self._envs),
        }

    def make(self, source: Any, kwargs: dict[str, Any]) -> tuple[str, Any]:
        def run() -> tuple[int, str]:
            if isinstance(source, (str, gym.envs.registration.EnvSpec)):
                env = gym.make(source, **kwargs)
            else:
                env = source()
            with self._lock:
                handle = next(self._ids)
                self._envs[handle] = env
            return handle, env_id_of(env, source)

        return self._guard(run)

    def reset(self, handle: int, seed: int | None, options: dict[str, Any] | None):
        return self._guard(lambda: self._env(handle).reset(seed=seed, options=options))

    def step(self, handle: int, action: Any) -> tuple[str, Any]:
        def run() -> tuple[Any, ...]:
            env = self._env(handle)
            obs, reward, terminated, truncated, info = env.step(action)
            metrics = None
            if terminated or truncated:  # save the driver a round trip at the end
                metrics = dict(getattr(env.unwrapped, "episode_metrics", {}) or {})
            return obs, reward, terminated, truncated, info, metrics

        return self._guard(run)

    def episode_metrics(self, handle: int) -> tuple[str, Any]:
        return self._guard(
            lambda: dict(getattr(self._env(handle).unwrapped, "episode_metrics", {}) or {})
        )

    def render(self, handle: int) -> tuple[str, Any]:
        return self._guard(lambda: self._env(handle).render())

    def bind(self, handle: int, token: str, payload: bytes) -> tuple[str, Any]:
        def run() -> str:
            with self._lock:
                binder = self._binders.get(token)
                if binder is None:
                    import pickle

                    binder = self._binders[token] = pickle.loads(payload)
                    while len(self._binders) > _BINDER_CACHE:
                        self._binders.popitem(last=False)
            bound = binder.for_env(self._env(handle))
            self._bound[handle] = bound
            return str(getattr(bound, "name", type(bound).__name__))

        return self._guard(run)

    def act(
        self, handle: int, messages: Sequence[Message], sampling: SamplingParams
    ) -> tuple[str, Any]:
        def run() -> Completion:
            bound = self._bound.get(handle)
            if bound is None:
                raise EnvStateError("No policy is bound to this env; call bind_policy first.")
            future = asyncio.run_coroutine_threadsafe(
                bound(messages, sampling), self._policy_loop()
            )
            return future.result()

        return self._guard(run)

    def _policy_loop(self) -> asyncio.AbstractEventLoop:
        """One event loop per actor, on its own thread, for env-bound policies."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="agentgym-bound-policy", daemon=True
                ).start()
                self._loop = loop
            return self._loop

    def close_env(self, handle: int) -> tuple[str, Any]:
        def run() -> None:
            with self._lock:
                env = self._envs.pop(handle, None)
                self._bound.pop(handle, None)
            if env is not None:
                env.close()

        return self._guard(run)

    def shutdown(self) -> None:
        """Close every env, then exit the actor process (so atexit handlers run:
        grading pools and sandbox pools shut down cleanly)."""
        import ray

        with self._lock:
            envs = list(self._envs.values())
            self._envs.clear()
            self._bound.clear()
        for env in envs:
            try:
                env.close()
            except Exception:
                pass
        ray.actor.exit_actor()


_remote_host_class: Any = None


def _remote_host() -> Any:
    global _remote_host_class
    if _remote_host_class is None:
        import ray

        _remote_host_class = ray.remote(_EnvHost)
    return _remote_host_class


# ----------------------------------------------------------------------------- driver
class RemoteEnv:
    """One env instance inside a Ray env worker, leased to one episode at a time.

    Get one from :meth:`RayEnvWorkers.acquire`, give it back with
    :meth:`RayEnvWorkers.release`. The methods mirror Gymnasium's and are awaited.

    Attributes:
        env_id: the id the env reports (its spec id).
        worker: index of the actor that holds it.
    """

    def __init__(self, workers: RayEnvWorkers, worker: int, handle: int, env_id: str, key: int):
        self.workers = workers
        self.worker = worker
        self.handle = handle
        self.env_id = env_id
        self.key = key
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
    ``workers=``; make it once (start-up costs seconds), use it for every rollout, and
    :meth:`close` it at the end (also a context manager). See the module docstring for
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
            :func:`default_temp_dir`; checked to lie outside the virtual environment and
            the repo, and short enough for Ray's socket paths).
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
        self.started_ray = False
        self.temp_dir: str | None = None
        self.session_dir: str | None = None
        self.keep_logs = keep_logs
        self._actors: list[Any] = []
        self._infos: list[dict[str, Any]] = []
        self._closed = False
        self._lock = threading.Lock()
        self._configs: list[tuple[Any, dict[str, Any]]] = []
        self._idle: dict[int, list[RemoteEnv]] = {}
        self._busy = [0] * num_workers
        self._count = [0] * num_workers
        self._binders: OrderedDict[int, tuple[Any, str, bytes]] = OrderedDict()

        # an explicit temp dir is checked even when unused, so a bad value shows at once
        explicit_temp = check_temp_dir(temp_dir) if temp_dir is not None else None
        if address is None and os.environ.get("RAY_ADDRESS"):
            address = os.environ["RAY_ADDRESS"]
        if address is not None:
            _check_reachable(address)

        import ray

        if ray.is_initialized():
            pass  # use this process's connection (and leave it up at close)
        elif address is not None:
            self._connect(ray, address, log_to_driver)
        else:
            needed = math.ceil(num_workers * cpus_per_worker)
            cpus = num_cpus if num_cpus is not None else max(os.cpu_count() or 1, needed)
            if cpus < needed:
                raise ConfigError(
                    f"{num_workers} workers x cpus_per_worker={cpus_per_worker} need {needed} "
                    f"CPUs but the local Ray gets num_cpus={cpus}. Lower cpus_per_worker (0 "
                    "lets workers share CPUs) or raise num_cpus."
                )
            wanted = explicit_temp or check_temp_dir(default_temp_dir())
            self._start_local(ray, wanted, cpus, object_store_memory, log_to_driver)
        try:
            self._start_actors(ray, cpus_per_worker, runtime_env, start_timeout_s)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ start-up
    @staticmethod
    def _connect(ray: Any, address: str, log_to_driver: bool) -> None:
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
        self,
        ray: Any,
        temp_dir: str,
        num_cpus: int,
        object_store_memory: int | None,
        log_to_driver: bool,
    ) -> None:
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
        self.started_ray = True
        self.temp_dir = temp_dir
        try:  # no public API gives the session dir
            self.session_dir = ray._private.worker._global_node.get_session_dir_path()
        except Exception:
            self.session_dir = None

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
        host = _remote_host().options(**options)
        driver_path = [os.path.abspath(p) for p in sys.path if p]
        self._actors = [host.remote(i, driver_path) for i in range(self.num_workers)]
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
        try:
            handle, env_id = await self._call(worker, "make", (source, kwargs), env_id=label)
        except BaseException:
            with self._lock:
                self._busy[worker] -= 1
                self._count[worker] -= 1
            raise
        return RemoteEnv(self, worker, handle, env_id, key)

    def release(self, env: RemoteEnv, *, discard: bool = False) -> None:
        """Give a leased env back. ``discard=True`` closes it instead of keeping it for
        reuse (after an error, or when an episode was cancelled mid-call)."""
        with self._lock:
            self._busy[env.worker] = max(0, self._busy[env.worker] - 1)
            if self._closed:
                return
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
            while len(self._binders) > _BINDER_CACHE:
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

        try:
            ref = getattr(self._actors[worker], method).remote(*args)
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
            raise EnvWorkerError(
                f"Ray env worker {worker} died during {method}() of {env_id}: {e}",
                env_id=env_id,
            ) from None
        except ray.exceptions.RayTaskError as e:  # the call itself failed outside the env
            raise EnvWorkerError(
                f"{method}() of {env_id} failed in Ray env worker {worker}:\n{e}",
                env_id=env_id,
            ) from None
        if status == "ok":
            return value
        remote_type = value["type"]
        cls = _error_class(_import_type(remote_type))
        where = self._infos[worker] if worker < len(self._infos) else {}
        raise cls(
            f"{env_id} raised {remote_type.rpartition('.')[2]} in {method}() on Ray env "
            f"worker {worker} (pid {where.get('pid', '?')} on {where.get('host', '?')}): "
            f"{value['message']}\n\nTraceback in the worker:\n{value['traceback'].rstrip()}",
            env_id=env_id,
            remote_type=remote_type,
            remote_traceback=value["traceback"],
        )

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
        if self.started_ray:
            ray.shutdown()
            if self.session_dir and not self.keep_logs:
                shutil.rmtree(self.session_dir, ignore_errors=True)

    def __enter__(self) -> RayEnvWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self.num_workers} workers"
        return f"RayEnvWorkers({state}, started_ray={self.started_ray})"
