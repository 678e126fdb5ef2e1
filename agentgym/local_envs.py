"""Env work in this process: :class:`LocalEnvs`, a thread pool and the envs kept in it.

An env's ``make``, ``reset`` and ``step`` block (they may generate a task, grade, run a
sandbox or hidden tests), so a rollout never calls them on its event loop: they run in a
thread pool, queued to a few drainer threads (:class:`_EnvCalls`). With ``keep=True`` a
:class:`LocalEnvs` also keeps env instances between rollouts, by configuration (env id or
factory, and ``env_kwargs``), so a loop that rolls out again and again (the trainer, a
benchmark) makes each env once. The other place env work can run is Ray actors
(:class:`agentgym.RayEnvWorkers`); :func:`agentgym.rollout` takes either as ``env_host``.

Slots: a rollout (:class:`LocalRollout`) runs all its episodes at once on at most
``n_envs`` envs. An episode waits for a slot (a semaphore of ``n_envs``), takes an idle env
or makes one, and frees its slot when it ends, whatever became of the env: given back
after a good episode, closed after a failed one (the episode that gets the slot makes a
fresh env). A make that fails or a wait that is cancelled frees the slot too, and once the
rollout has ended no env is made. So every waiting episode gets a slot, also when every
episode before it failed.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym

from agentgym.errors import ConfigError, EnvStateError
from agentgym.registration import make
from agentgym.types import Message
from agentgym.workers import config_index, env_id_of

EnvSource = str | Callable[[], gym.Env]


class LocalEnvs:
    """Where env work runs when it stays in this process.

    Args:
        threads: threads for env calls (``None``: as many as the first rollout that
            uses it runs envs at once).
        keep: keep env instances between rollouts instead of closing them when a
            rollout ends. A kept env is ``reset`` with the next task's seed like a new
            one, so the episodes are the same (Gymnasium's ``reset(seed=...)``
            contract); an env whose episode failed, or that was still in an episode
            when its rollout failed, is closed, never kept.

    Not thread-safe: one event loop at a time. Use it as a context manager, or call
    :meth:`close` (closes the kept envs and stops the threads).
    """

    def __init__(self, threads: int | None = None, *, keep: bool = False) -> None:
        if threads is not None and threads < 1:
            raise ConfigError(f"LocalEnvs(threads=...) must be >= 1 or None, got {threads}.")
        self.threads = threads
        self.keep = keep
        self._pool: ThreadPoolExecutor | None = None
        self._configs: list[tuple[Any, dict[str, Any]]] = []
        self._idle: dict[int, list[gym.Env]] = {}

    def executor(self, wanted: int) -> tuple[ThreadPoolExecutor, int]:
        """The thread pool (made on first use, ``wanted`` threads unless ``threads`` was
        given) and its thread count."""
        if self._pool is None:
            n = self.threads or max(1, wanted)
            self._pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="agentgym-env")
            self.threads = n
        return self._pool, int(self.threads or wanted)

    def key(self, source: EnvSource, env_kwargs: dict[str, Any] | None) -> int:
        """The configuration index of envs made from ``source`` with ``env_kwargs``."""
        return config_index(self._configs, source, dict(env_kwargs or {}))

    def take(self, key: int) -> gym.Env | None:
        """A kept idle env of configuration ``key``, or None."""
        idle = self._idle.get(key)
        return idle.pop() if idle else None

    def give(self, key: int, env: gym.Env) -> None:
        """Keep ``env`` (idle, healthy) for the next rollout of configuration ``key``."""
        self._idle.setdefault(key, []).append(env)

    def __len__(self) -> int:
        """Envs kept idle."""
        return sum(len(v) for v in self._idle.values())

    def close(self) -> None:
        """Close every kept env and stop the threads; safe to call twice."""
        envs = [e for idle in self._idle.values() for e in idle]
        self._idle.clear()
        close_all(envs)
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def __enter__(self) -> LocalEnvs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: how long a rollout's end waits for its envs to close (see LocalRollout.close)
CLOSE_WAIT_S = 30.0


class _EnvCalls:
    """Runs blocking env calls in a thread pool with few thread hand-offs.

    Calls are queued; at most ``threads`` drainer jobs run in the pool, each taking
    calls off the queue until it is empty. Episodes tend to call their envs all at
    once (every ``reset`` at the start of a batch, every ``step`` when a batch of
    completions arrives): those calls are then picked up by drainers already running
    instead of costing one executor job each. On envs whose calls take a fraction of a
    millisecond, that hand-off was most of the cost. As many calls still run at once as
    the pool has threads, and each result goes back to the event loop as soon as it is
    ready.
    """

    def __init__(self, pool: ThreadPoolExecutor, threads: int) -> None:
        self.pool = pool
        self.threads = max(1, threads)
        self.queue: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Callable[[], Any]]]
        self.queue = deque()
        self.lock = threading.Lock()
        self.drainers = 0

    def call(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        with self.lock:
            self.queue.append((loop, fut, fn))
            start = self.drainers < self.threads
            if start:
                self.drainers += 1
        if start:
            try:
                self.pool.submit(self._drain)
            except BaseException:
                with self.lock:
                    self.drainers -= 1
                raise
        return fut

    def _drain(self) -> None:
        while True:
            with self.lock:
                if not self.queue:
                    self.drainers -= 1
                    return
                loop, fut, fn = self.queue.popleft()
            try:
                result, error = fn(), None
            except BaseException as e:  # handed to the awaiting episode
                result, error = None, e
            try:
                loop.call_soon_threadsafe(_resolve, fut, result, error)
            except RuntimeError:  # the loop is closed: the rollout ended without this call
                pass


def _resolve(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.cancelled():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


class LocalEnv:
    """An env in this process; blocking calls go to the thread pool."""

    def __init__(self, env: gym.Env, calls: _EnvCalls, source: EnvSource) -> None:
        self.env = env
        self.calls = calls
        self.env_id = env_id_of(env, source)

    async def reset(self, *, seed: int | None = None) -> tuple[list[Message], dict[str, Any]]:
        return await self.calls.call(lambda: self.env.reset(seed=seed))

    async def step(self, action: str) -> tuple[list[Message], Any, bool, bool, dict[str, Any]]:
        return await self.calls.call(lambda: self.env.step(action))

    async def episode_metrics(self) -> dict[str, Any]:
        return dict(getattr(self.env.unwrapped, "episode_metrics", {}) or {})

    async def bind_policy(self, policy: Any) -> Any:
        return policy.for_env(self.env)


class LocalRollout:
    """One rollout's ``n_envs`` env instances in a :class:`LocalEnvs`: made on demand in
    its thread pool (or taken from the kept ones), reused across the rollout's episodes,
    and at its end closed, or given back when the host keeps envs."""

    def __init__(
        self, source: EnvSource, env_kwargs: dict[str, Any] | None, n_envs: int, host: LocalEnvs
    ) -> None:
        self.source, self.env_kwargs, self.n_envs = source, env_kwargs, n_envs
        pool, threads = host.executor(n_envs)
        self.calls = _EnvCalls(pool, min(n_envs, threads))
        self.cache = host if host.keep else None
        self.cache_key = host.key(source, env_kwargs) if host.keep else -1
        self.slots = asyncio.Semaphore(n_envs)  # one per env in use or about to be made
        self.idle: deque[LocalEnv] = deque()  # made, healthy, between episodes
        self.made: list[LocalEnv] = []
        self.closed = False
        self.closing: list[asyncio.Future[Any]] = []  # envs being closed

    def _make(self) -> gym.Env:
        if isinstance(self.source, str):
            return make(self.source, **(self.env_kwargs or {}))
        if self.env_kwargs:
            raise ConfigError(
                "env_kwargs is only used when env is an id; bake them into the factory."
            )
        return self.source()

    async def acquire(self) -> LocalEnv:
        await self.slots.acquire()  # woken by release(), whatever became of the env
        try:
            if self.closed:
                raise EnvStateError("This rollout has ended; its envs are closed.")
            if self.idle:
                return self.idle.popleft()
            env = self.cache.take(self.cache_key) if self.cache is not None else None
            if env is None:
                env = await self.calls.call(self._make)
        except BaseException:  # no env came of this slot (cancelled, make failed): free it
            self.slots.release()
            raise
        e = LocalEnv(env, self.calls, self.source)
        self.made.append(e)
        return e

    def release(self, e: LocalEnv, ok: bool) -> None:
        """Give ``e`` back (``ok``) or drop it; either way its slot goes to a waiter."""
        if self.closed:
            pass  # the rollout ended first; close() has dealt with this env
        elif ok:
            self.idle.append(e)
        else:
            # its episode failed or was cancelled mid-call: it may be in any state. Close
            # it (in the background); the episode that gets its slot makes a fresh env.
            self.made.remove(e)
            self.closing.append(_close_apart([e.env]))
        self.slots.release()

    async def close(self) -> None:
        # only envs that are idle (their episodes went well) go back to a cache; one still
        # in an episode (the rollout failed while it ran) is closed like the rest
        self.closed = True
        idle = {id(e) for e in self.idle}
        self.idle.clear()
        keep: set[int] = set()
        if self.cache is not None:
            keep = {id(e) for e in self.made if id(e) in idle}
            for e in self.made:
                if id(e) in keep:
                    self.cache.give(self.cache_key, e.env)
        to_close = [e.env for e in self.made if id(e) not in keep]
        if to_close:
            self.closing.append(_close_apart(to_close))
        # bounded: an env whose close hangs (its call that never returned holds it) must
        # not hold the rollout; it is abandoned
        if self.closing:
            await asyncio.wait(self.closing, timeout=CLOSE_WAIT_S)


def _close_apart(envs: Sequence[gym.Env]) -> asyncio.Future[None]:
    """Close ``envs`` on a thread of their own, not the env pool's (whose threads a call
    that never returns may hold: closing a frozen sandbox is what ends such a call);
    the future is done when they are closed."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def close() -> None:
        close_all(envs)
        try:
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(None))
        except RuntimeError:  # the event loop is gone: nobody waits any more
            pass

    threading.Thread(target=close, name="agentgym-env-close", daemon=True).start()
    return done


def close_all(envs: Sequence[gym.Env]) -> None:
    for env in envs:
        try:
            env.close()
        except Exception:  # closing is best effort: one env's failure must not keep others open
            pass
