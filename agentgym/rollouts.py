"""``rollout``: the one place that runs environments against a policy.

Many episodes run at once on one asyncio event loop. Policy calls are awaited (engines
batch the concurrent calls); blocking environment work (``make``, ``reset``, ``step``,
which may grade, run sandboxes or tests) runs in a thread pool so it never stalls the
loop. For group-based RL each task (a ``reset`` seed) is played ``group_size`` times.
With ``workers=`` (a :class:`~agentgym.workers.RayEnvWorkers`) the environment work runs
in Ray actors instead, with the same episodes as a result (see ``docs/ray.md``).

Episodes come back ordered by (task, sample). Each carries every turn of every
conversation and the env's terminal reward and breakdown; ``Episode.metrics`` gets the
env's own metrics (``env.unwrapped.episode_metrics``) plus wall-clock timings measured
here: ``time/start`` and ``time/end`` (``time.monotonic`` seconds), ``time/policy_s`` and
``time/env_s``.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from agentgym.errors import ConfigError, EnvStateError
from agentgym.progress import Progress
from agentgym.types import Episode, Message, SamplingParams, Turn
from agentgym.workers import config_index, env_id_of

if TYPE_CHECKING:
    from agentgym.workers import RayEnvWorkers, RemoteEnv

EnvSource = str | Callable[[], gym.Env]
EpisodeCallback = Callable[[Episode], Any | Awaitable[Any]]

#: safety net for envs without limits: a rollout never runs more steps than this
DEFAULT_MAX_STEPS = 10_000


def derive_seed(*parts: Any) -> int:
    """A stable 31-bit seed from any parts (same parts, same seed, on every machine)."""
    h = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & 0x7FFFFFFF


async def rollout_async(
    env: EnvSource,
    policy: Any,
    *,
    seeds: Sequence[int] | None = None,
    num_tasks: int | None = None,
    group_size: int = 1,
    sampling: SamplingParams | None = None,
    concurrency: int = 8,
    env_kwargs: dict[str, Any] | None = None,
    out: str | Path | None = None,
    on_episode: EpisodeCallback | None = None,
    progress: bool = False,
    max_steps: int = DEFAULT_MAX_STEPS,
    executor: ThreadPoolExecutor | None = None,
    workers: RayEnvWorkers | None = None,
    env_cache: EnvCache | None = None,
) -> list[Episode]:
    """Run ``len(seeds) * group_size`` episodes concurrently; see the module docstring.

    Args:
        env: a registered env id, or a zero-argument factory returning an env.
        policy: a :class:`~agentgym.policies.Policy`, or an env-bound policy factory
            (an object with ``for_env(env) -> Policy``, like the oracle).
        seeds: the ``reset`` seed of each task. Default: ``range(num_tasks or 1)``.
        num_tasks: number of tasks when ``seeds`` is not given.
        group_size: samples per task (G in GRPO/DAPO).
        sampling: sampling parameters. When ``sampling.seed`` is set, each request gets
            a seed derived from it, the task, the sample index and the turn, so a
            seeded engine reproduces the whole rollout.
        concurrency: episodes in flight at once (also the number of env instances).
        env_kwargs: keyword arguments for ``gym.make`` when ``env`` is an id.
        out: append each finished episode to this JSONL file as it finishes.
        on_episode: called (or awaited) with each finished episode, as it finishes.
        progress: show a progress bar (plain lines when not on a terminal).
        max_steps: a step cap per episode, a safety net against envs with no limit.
        executor: thread pool for env work (default: one of ``concurrency`` threads);
            not used with ``workers``.
        workers: run env ``make``/``reset``/``step`` in these Ray actors instead of a
            thread pool (:class:`~agentgym.workers.RayEnvWorkers`; ``env`` is then an id
            or a picklable factory). Env instances stay cached in the workers across
            rollouts; env-bound policies (``for_env``) are bound and called in the
            worker. The episodes are the same as without workers.
        env_cache: take env instances from this :class:`EnvCache` and give them back at
            the end instead of closing them (a trainer keeps one for its whole run, so
            envs are made once rather than every step); not used with ``workers``.
    """
    if group_size < 1:
        raise ConfigError(f"group_size must be >= 1, got {group_size}.")
    if concurrency < 1:
        raise ConfigError(f"concurrency must be >= 1, got {concurrency}.")
    if seeds is None:
        seeds = list(range(num_tasks if num_tasks is not None else 1))
    seeds = list(seeds)
    sampling = sampling or SamplingParams()
    jobs = [(ti, seed, s) for ti, seed in enumerate(seeds) for s in range(group_size)]
    results: list[Episode | None] = [None] * len(jobs)
    if not jobs:
        return []
    n_envs = min(concurrency, len(jobs))
    out_path = Path(out) if out is not None else None
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
    envs: _LocalEnvs | _WorkerEnvs
    if workers is not None:
        envs = _WorkerEnvs(workers, env, env_kwargs, n_envs)
    else:
        envs = _LocalEnvs(env, env_kwargs, n_envs, executor, env_cache)
    bar = Progress(len(jobs), desc="rollout", unit="episode", enabled=progress)
    reward_sum = 0.0

    async def run_one(k: int) -> None:
        nonlocal reward_sum
        _ti, seed, sample = jobs[k]
        e = await envs.acquire()
        ok = False
        try:
            ep = await _play(e, policy, seed, sample, sampling, max_steps)
            ok = True
        finally:
            envs.release(e, ok)
        results[k] = ep
        if out_path is not None:
            with out_path.open("a", encoding="utf-8") as f:
                f.write(ep.to_json() + "\n")
        if on_episode is not None:
            r = on_episode(ep)
            if inspect.isawaitable(r):
                await r
        reward_sum += ep.reward
        bar.update(1, {"mean_reward": reward_sum / (bar.done + 1)})

    try:
        await asyncio.gather(*(run_one(k) for k in range(len(jobs))))
    finally:
        bar.close()
        await envs.close()
    return [ep for ep in results if ep is not None]


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


class _LocalEnv:
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


class EnvCache:
    """Env instances kept between rollouts in this process, by configuration.

    :func:`rollout_async` with ``env_cache=`` takes idle envs of the same source and
    ``env_kwargs`` (compared by equality) before making new ones, and gives them back
    when it ends instead of closing them; an env whose episode failed is closed, never
    given back. A reused env is ``reset`` with the task's seed like a new one, so the
    episodes are the same (the contract Gymnasium's ``reset(seed=...)`` sets). Not
    thread-safe: one event loop at a time. :meth:`close` closes every idle env.
    """

    def __init__(self) -> None:
        self._configs: list[tuple[Any, dict[str, Any]]] = []
        self._idle: dict[int, list[gym.Env]] = {}

    def key(self, source: EnvSource, env_kwargs: dict[str, Any] | None) -> int:
        return config_index(self._configs, source, dict(env_kwargs or {}))

    def take(self, key: int) -> gym.Env | None:
        idle = self._idle.get(key)
        return idle.pop() if idle else None

    def give(self, key: int, env: gym.Env) -> None:
        self._idle.setdefault(key, []).append(env)

    def __len__(self) -> int:
        return sum(len(v) for v in self._idle.values())

    def close(self) -> None:
        envs = [e for idle in self._idle.values() for e in idle]
        self._idle.clear()
        _close_all(envs)


def _close_all(envs: Sequence[gym.Env]) -> None:
    for env in envs:
        try:
            env.close()
        except Exception:  # closing is best effort: one env's failure must not keep others open
            pass


class _LocalEnvs:
    """``n_envs`` env instances made on demand in a thread pool (or taken from an
    :class:`EnvCache`), reused across episodes, and closed (or given back to the cache)
    at the end of the rollout (the in-process path)."""

    def __init__(
        self,
        source: EnvSource,
        env_kwargs: dict[str, Any] | None,
        n_envs: int,
        executor: ThreadPoolExecutor | None,
        cache: EnvCache | None = None,
    ) -> None:
        self.source, self.env_kwargs, self.n_envs = source, env_kwargs, n_envs
        self.own_pool = executor is None
        self.pool = executor or ThreadPoolExecutor(
            max_workers=n_envs, thread_name_prefix="agentgym-env"
        )
        # the pool's thread count (its own attribute; ours has one thread per env)
        threads = getattr(self.pool, "_max_workers", n_envs)
        self.calls = _EnvCalls(self.pool, min(n_envs, threads))
        self.cache = cache
        self.cache_key = cache.key(source, env_kwargs) if cache is not None else -1
        self.idle: asyncio.Queue[_LocalEnv] = asyncio.Queue()
        self.made: list[_LocalEnv] = []
        self.broken: set[int] = set()
        self.lock = asyncio.Lock()

    def _make(self) -> gym.Env:
        if isinstance(self.source, str):
            return gym.make(self.source, **(self.env_kwargs or {}))
        if self.env_kwargs:
            raise ConfigError(
                "env_kwargs is only used when env is an id; bake them into the factory."
            )
        return self.source()

    async def acquire(self) -> _LocalEnv:
        async with self.lock:
            if self.idle.empty() and len(self.made) < self.n_envs:
                env = self.cache.take(self.cache_key) if self.cache is not None else None
                if env is None:
                    env = await self.calls.call(self._make)
                e = _LocalEnv(env, self.calls, self.source)
                self.made.append(e)
                return e
        return await self.idle.get()

    def release(self, e: _LocalEnv, ok: bool) -> None:
        if not ok:  # its episode failed or was cancelled mid-call: it may be in any state
            self.broken.add(id(e))
        self.idle.put_nowait(e)

    async def close(self) -> None:
        # only envs that are idle and whose episodes went well go back to a cache; one
        # still in an episode (the rollout failed while it ran) is closed like the rest
        idle = set()
        while not self.idle.empty():
            idle.add(id(self.idle.get_nowait()))
        keep: set[int] = set()
        if self.cache is not None:
            keep = {id(e) for e in self.made if id(e) in idle and id(e) not in self.broken}
            for e in self.made:
                if id(e) in keep:
                    self.cache.give(self.cache_key, e.env)
        to_close = [e.env for e in self.made if id(e) not in keep]
        if to_close:
            await self.calls.call(lambda: _close_all(to_close))
        if self.own_pool:
            self.pool.shutdown(wait=False)


class _WorkerEnvs:
    """Env instances leased from Ray env workers: at most ``n_envs`` at once. They stay
    in the workers after the rollout (the workers' owner closes them)."""

    def __init__(
        self,
        workers: RayEnvWorkers,
        source: EnvSource,
        env_kwargs: dict[str, Any] | None,
        n_envs: int,
    ) -> None:
        self.workers, self.source, self.env_kwargs = workers, source, env_kwargs
        self.slots = asyncio.Semaphore(n_envs)

    async def acquire(self) -> RemoteEnv:
        await self.slots.acquire()
        try:
            return await self.workers.acquire(self.source, self.env_kwargs)
        except BaseException:
            self.slots.release()
            raise

    def release(self, e: RemoteEnv, ok: bool) -> None:
        # an env whose episode failed or was cancelled mid-call may be in any state
        self.workers.release(e, discard=not ok)
        self.slots.release()

    async def close(self) -> None:
        return None


async def _play(
    env: _LocalEnv | RemoteEnv,
    policy: Any,
    seed: int,
    sample: int,
    sampling: SamplingParams,
    max_steps: int,
) -> Episode:
    t_start = time.monotonic()
    env_s = policy_s = 0.0
    t0 = time.monotonic()
    obs, info = await env.reset(seed=seed)
    env_s += time.monotonic() - t0
    bound = await env.bind_policy(policy) if hasattr(policy, "for_env") else policy
    env_id = env.env_id
    turns: list[Turn] = []
    reward, breakdown, terminated, truncated = 0.0, {}, False, False
    for step in range(max_steps):
        req = sampling
        if sampling.seed is not None:
            req = sampling.with_seed(derive_seed(sampling.seed, seed, sample, step))
        t0 = time.monotonic()
        completion = await bound(obs, req)
        policy_s += time.monotonic() - t0
        turns.append(
            Turn(
                messages=tuple(obs),
                completion=completion,
                kind=info.get("turn_kind", "act"),
                conversation=int(info.get("conversation", 0)),
            )
        )
        t0 = time.monotonic()
        obs, reward, terminated, truncated, info = await env.step(completion.text)
        env_s += time.monotonic() - t0
        if terminated or truncated:
            breakdown = dict(info.get("reward_breakdown", {}))
            break
    else:
        raise EnvStateError(
            f"{env_id} (seed {seed}) did not end within {max_steps} steps. Give the env a turn "
            "limit (max_turns=...) or raise rollout(max_steps=...)."
        )
    metrics = await env.episode_metrics()
    metrics.update(
        {
            "time/start": t_start,
            "time/end": time.monotonic(),
            "time/policy_s": policy_s,
            "time/env_s": env_s,
        }
    )
    return Episode(
        env_id=env_id,
        task_id=str(info.get("task_id", seed)),
        seed=seed,
        turns=turns,
        reward=float(reward),
        reward_breakdown=breakdown,
        terminated=bool(terminated),
        truncated=bool(truncated),
        metrics=metrics,
        sample=sample,
    )


def rollout(env: EnvSource, policy: Any, **kwargs: Any) -> list[Episode]:
    """Synchronous :func:`rollout_async` (runs its own event loop); takes the same
    keyword arguments, ``workers=`` included."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(rollout_async(env, policy, **kwargs))
    raise EnvStateError(
        "rollout() was called inside a running event loop; use `await rollout_async(...)`."
    )
