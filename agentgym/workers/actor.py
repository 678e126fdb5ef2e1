"""The Ray env worker itself: the actor that holds env instances and steps them.

Each actor is a threaded Ray actor (``max_concurrency`` threads) made from
:class:`EnvHost`. It keeps env instances by integer handle, binds env-bound policies
(``for_env``) to them, and answers every call with ``("ok", value)`` or
``("error", report)`` (:func:`~agentgym.workers.errors.guarded`). It runs in the actor's
process; the driver only sees it through :class:`~agentgym.workers.RayEnvWorkers`.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import itertools
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from agentgym.errors import EnvStateError
from agentgym.types import Completion, Message, SamplingParams
from agentgym.workers.errors import guarded

__all__ = ["BINDER_CACHE", "HEALTH_GROUP", "STACKS_SIGNAL", "EnvHost", "env_id_of", "remote_host"]

#: Env-bound policies (pickled) kept per actor, and per driver, most recent first.
BINDER_CACHE = 8
#: The actor's concurrency group for :meth:`EnvHost.health`: one thread of its own, so
#: a health check is answered even while every env thread is busy.
HEALTH_GROUP = "health"
#: The signal on which an actor writes its Python stacks (faulthandler) to the file its
#: health record names.
STACKS_SIGNAL = signal.SIGUSR2


def env_id_of(env: gym.Env, source: Any) -> str:
    """The id an episode reports: the env's spec id, else the id asked for, else its class."""
    if env.spec is not None:
        return env.spec.id
    if isinstance(source, str):
        return source
    if isinstance(source, gym.envs.registration.EnvSpec):
        return source.id
    return type(env.unwrapped).__name__


class EnvHost:
    """The body of one Ray env worker (a threaded actor): env instances by handle.

    Every method returns ``("ok", value)`` or ``("error", details)`` so that any env
    exception reaches the driver as text (type, message, traceback), whether or not it
    can be pickled.

    Args:
        index: the worker's index among the driver's actors (for messages).
        driver_sys_path: the driver's ``sys.path``, appended to this process's.
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
        # health: counters the driver's monitor turns into rates (see health())
        self._started = time.time()
        self._seq = 0
        self._calls = 0
        self._errors = 0
        self._busy_s = 0.0
        self._inflight: dict[int, float] = {}
        self._call_ids = itertools.count()
        self._stacks_path, self._stacks = _register_stacks()
        self._node = _node_id()

    def _env(self, handle: int) -> gym.Env:
        env = self._envs.get(handle)
        if env is None:
            raise EnvStateError(f"Env handle {handle} is not open in Ray env worker {self.index}.")
        return env

    def _tracked(self, fn: Callable[[], Any]) -> tuple[str, Any]:
        """:func:`guarded`, counted: calls, errors, seconds busy, calls in flight."""
        token = next(self._call_ids)
        t0 = time.monotonic()
        with self._lock:
            self._inflight[token] = t0
        status = "error"
        try:
            status, value = guarded(fn)
        finally:
            with self._lock:
                self._inflight.pop(token, None)
                self._calls += 1
                self._busy_s += time.monotonic() - t0
                self._errors += status == "error"
        return status, value

    def health(self) -> dict[str, Any]:
        """This worker's heartbeat: who and where, cumulative counters (CPU seconds,
        env calls, errors, seconds busy in calls) and gauges (memory, calls in flight,
        the oldest one's age). Answered on a thread of its own (:data:`HEALTH_GROUP`)."""
        now = time.monotonic()
        with self._lock:
            self._seq += 1
            oldest = now - min(self._inflight.values()) if self._inflight else 0.0
            return {
                "kind": "worker",
                "worker": f"worker{self.index}",
                "index": self.index,
                "host": socket.gethostname(),
                "node": self._node,
                "pid": os.getpid(),
                "started": self._started,
                "seq": self._seq,
                "t": time.time(),
                "counters": {
                    "cpu_s": time.process_time(),
                    "calls": self._calls,
                    "errors": self._errors,
                    "busy_s": self._busy_s + sum(now - t for t in self._inflight.values()),
                },
                "gauges": {
                    "rss_mb": _rss_mb(),
                    "inflight": len(self._inflight),
                    "oldest_call_s": oldest,
                },
                "envs": len(self._envs),
                "stacks": self._stacks_path,
            }

    def info(self) -> dict[str, Any]:
        """Index, pid, host, Ray node id and number of envs of this worker."""
        return {
            "index": self.index,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "node": self._node,
            "envs": len(self._envs),
        }

    def make(self, source: Any, kwargs: dict[str, Any]) -> tuple[str, Any]:
        """Make an env from a spec/id (``gym.make``) or a factory: ``(handle, env id)``."""

        def run() -> tuple[int, str]:
            if isinstance(source, (str, gym.envs.registration.EnvSpec)):
                env = gym.make(source, **kwargs)
            else:
                env = source()
            with self._lock:
                handle = next(self._ids)
                self._envs[handle] = env
            return handle, env_id_of(env, source)

        return self._tracked(run)

    def reset(self, handle: int, seed: int | None, options: dict[str, Any] | None):
        """``env.reset(seed=..., options=...)``."""
        return self._tracked(lambda: self._env(handle).reset(seed=seed, options=options))

    def step(self, handle: int, action: Any) -> tuple[str, Any]:
        """``env.step(action)``, plus the episode metrics when the episode ended."""

        def run() -> tuple[Any, ...]:
            env = self._env(handle)
            obs, reward, terminated, truncated, info = env.step(action)
            metrics = None
            if terminated or truncated:  # save the driver a round trip at the end
                metrics = dict(getattr(env.unwrapped, "episode_metrics", {}) or {})
            return obs, reward, terminated, truncated, info, metrics

        return self._tracked(run)

    def episode_metrics(self, handle: int) -> tuple[str, Any]:
        """A copy of ``env.unwrapped.episode_metrics``."""
        return self._tracked(
            lambda: dict(getattr(self._env(handle).unwrapped, "episode_metrics", {}) or {})
        )

    def render(self, handle: int) -> tuple[str, Any]:
        """``env.render()``."""
        return self._tracked(lambda: self._env(handle).render())

    def bind(self, handle: int, token: str, payload: bytes) -> tuple[str, Any]:
        """Bind the pickled env-bound policy ``payload`` (cached by ``token``) to an env."""

        def run() -> str:
            with self._lock:
                binder = self._binders.get(token)
                if binder is None:
                    import pickle

                    binder = self._binders[token] = pickle.loads(payload)
                    while len(self._binders) > BINDER_CACHE:
                        self._binders.popitem(last=False)
            bound = binder.for_env(self._env(handle))
            self._bound[handle] = bound
            return str(getattr(bound, "name", type(bound).__name__))

        return self._tracked(run)

    def act(
        self, handle: int, messages: Sequence[Message], sampling: SamplingParams
    ) -> tuple[str, Any]:
        """One reply of the policy bound to the env ``handle``."""

        def run() -> Completion:
            bound = self._bound.get(handle)
            if bound is None:
                raise EnvStateError("No policy is bound to this env; call bind_policy first.")
            future = asyncio.run_coroutine_threadsafe(
                bound(messages, sampling), self._policy_loop()
            )
            return future.result()

        return self._tracked(run)

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
        """Close the env ``handle`` and forget it (and its bound policy)."""

        def run() -> None:
            with self._lock:
                env = self._envs.pop(handle, None)
                self._bound.pop(handle, None)
            if env is not None:
                env.close()

        return self._tracked(run)

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
        if self._stacks is not None:
            with contextlib.suppress(Exception):
                faulthandler.unregister(STACKS_SIGNAL)
                self._stacks.close()
                os.unlink(self._stacks_path)
        ray.actor.exit_actor()


def _node_id() -> str:
    """The Ray node this actor runs on ("" outside Ray)."""
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id())
    except Exception:
        return ""


def _register_stacks() -> tuple[str, Any]:
    """Register faulthandler on :data:`STACKS_SIGNAL`, writing to a file of this process
    (so that a monitor on this host can read a hung worker's Python stacks): in the Ray
    session's log folder, which goes with a local Ray, else in the temp dir."""
    try:
        import ray

        folder = os.path.join(ray._private.worker._global_node.get_session_dir_path(), "logs")
    except Exception:  # no public API gives the session dir
        folder = os.path.join(tempfile.gettempdir(), "agentgym-stacks")
    path = os.path.join(folder, f"agentgym-stacks-worker-{os.getpid()}.txt")
    try:
        os.makedirs(folder, exist_ok=True)
        f = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the process's life)
        faulthandler.register(STACKS_SIGNAL, file=f, all_threads=True)
    except (OSError, RuntimeError, ValueError):
        return "", None
    return path, f


def _rss_mb() -> float:
    """Resident memory of this process in MiB (0 where ``/proc`` is missing)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


_remote_host_class: Any = None


def remote_host() -> Any:
    """:class:`EnvHost` as a Ray actor class (``ray.remote`` applied once, on first use)."""
    global _remote_host_class
    if _remote_host_class is None:
        import ray

        class _EnvHost(EnvHost):  # the health check on its own thread
            health = ray.method(concurrency_group=HEALTH_GROUP)(_health_of_env_host)

        _EnvHost.__name__ = _EnvHost.__qualname__ = "EnvHost"
        _remote_host_class = ray.remote(concurrency_groups={HEALTH_GROUP: 1})(_EnvHost)
    return _remote_host_class


def _health_of_env_host(self: EnvHost) -> dict[str, Any]:
    return EnvHost.health(self)
