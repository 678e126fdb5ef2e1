"""The Ray env worker itself: the actor that holds env instances and steps them.

Each actor is a threaded Ray actor (``max_concurrency`` threads) made from
:class:`EnvHost`. It keeps env instances by integer handle, binds env-bound policies
(``for_env``) to them, and answers every call with ``("ok", value)`` or
``("error", report)`` (:func:`~agentgym.workers.errors.guarded`). It runs in the actor's
process; the driver only sees it through :class:`~agentgym.workers.RayEnvWorkers`.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from agentgym.errors import EnvStateError
from agentgym.types import Completion, Message, SamplingParams
from agentgym.workers.errors import guarded

__all__ = ["BINDER_CACHE", "EnvHost", "env_id_of", "remote_host"]

#: Env-bound policies (pickled) kept per actor, and per driver, most recent first.
BINDER_CACHE = 8


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

    def _env(self, handle: int) -> gym.Env:
        env = self._envs.get(handle)
        if env is None:
            raise EnvStateError(f"Env handle {handle} is not open in Ray env worker {self.index}.")
        return env

    def info(self) -> dict[str, Any]:
        """Index, pid, host and number of envs of this worker."""
        return {
            "index": self.index,
            "pid": os.getpid(),
            "host": socket.gethostname(),
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

        return guarded(run)

    def reset(self, handle: int, seed: int | None, options: dict[str, Any] | None):
        """``env.reset(seed=..., options=...)``."""
        return guarded(lambda: self._env(handle).reset(seed=seed, options=options))

    def step(self, handle: int, action: Any) -> tuple[str, Any]:
        """``env.step(action)``, plus the episode metrics when the episode ended."""

        def run() -> tuple[Any, ...]:
            env = self._env(handle)
            obs, reward, terminated, truncated, info = env.step(action)
            metrics = None
            if terminated or truncated:  # save the driver a round trip at the end
                metrics = dict(getattr(env.unwrapped, "episode_metrics", {}) or {})
            return obs, reward, terminated, truncated, info, metrics

        return guarded(run)

    def episode_metrics(self, handle: int) -> tuple[str, Any]:
        """A copy of ``env.unwrapped.episode_metrics``."""
        return guarded(
            lambda: dict(getattr(self._env(handle).unwrapped, "episode_metrics", {}) or {})
        )

    def render(self, handle: int) -> tuple[str, Any]:
        """``env.render()``."""
        return guarded(lambda: self._env(handle).render())

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

        return guarded(run)

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

        return guarded(run)

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

        return guarded(run)

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


def remote_host() -> Any:
    """:class:`EnvHost` as a Ray actor class (``ray.remote`` applied once, on first use)."""
    global _remote_host_class
    if _remote_host_class is None:
        import ray

        _remote_host_class = ray.remote(EnvHost)
    return _remote_host_class
