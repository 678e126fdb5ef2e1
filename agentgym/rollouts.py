"""``rollout``: the one place that runs environments against a policy.

Many episodes run at once on one asyncio event loop. Policy calls are awaited (engines
batch the concurrent calls); blocking environment work (``make``, ``reset``, ``step``,
which may grade, run sandboxes or tests) runs in a thread pool so it never stalls the
loop. For group-based RL each task (a ``reset`` seed) is played ``group_size`` times.

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
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gymnasium as gym

from agentgym.errors import ConfigError, EnvStateError
from agentgym.types import Episode, SamplingParams, Turn

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
        executor: thread pool for env work (default: one of ``concurrency`` threads).
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
    own_executor = executor is None
    pool = executor or ThreadPoolExecutor(max_workers=n_envs, thread_name_prefix="agentgym-env")
    loop = asyncio.get_running_loop()

    def _make() -> gym.Env:
        if isinstance(env, str):
            return gym.make(env, **(env_kwargs or {}))
        if env_kwargs:
            raise ConfigError(
                "env_kwargs is only used when env is an id; bake them into the factory."
            )
        return env()

    idle: asyncio.Queue[gym.Env] = asyncio.Queue()
    made: list[gym.Env] = []
    lock = asyncio.Lock()
    out_path = Path(out) if out is not None else None
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
    bar = _Progress(len(jobs), enabled=progress)

    async def get_env() -> gym.Env:
        async with lock:
            if idle.empty() and len(made) < n_envs:
                e = await loop.run_in_executor(pool, _make)
                made.append(e)
                return e
        return await idle.get()

    async def run_one(k: int) -> None:
        _ti, seed, sample = jobs[k]
        e = await get_env()
        try:
            ep = await _play(e, policy, seed, sample, sampling, pool, max_steps, env)
        finally:
            idle.put_nowait(e)
        results[k] = ep
        if out_path is not None:
            with out_path.open("a", encoding="utf-8") as f:
                f.write(ep.to_json() + "\n")
        if on_episode is not None:
            r = on_episode(ep)
            if inspect.isawaitable(r):
                await r
        bar.update(ep)

    try:
        await asyncio.gather(*(run_one(k) for k in range(len(jobs))))
    finally:
        bar.close()
        for e in made:
            try:
                await loop.run_in_executor(pool, e.close)
            except Exception:
                pass
        if own_executor:
            pool.shutdown(wait=False)
    return [ep for ep in results if ep is not None]


async def _play(
    env: gym.Env,
    policy: Any,
    seed: int,
    sample: int,
    sampling: SamplingParams,
    pool: ThreadPoolExecutor,
    max_steps: int,
    source: EnvSource,
) -> Episode:
    loop = asyncio.get_running_loop()
    t_start = time.monotonic()
    env_s = policy_s = 0.0
    t0 = time.monotonic()
    obs, info = await loop.run_in_executor(pool, lambda: env.reset(seed=seed))
    env_s += time.monotonic() - t0
    bound = policy.for_env(env) if hasattr(policy, "for_env") else policy
    env_id = (
        env.spec.id
        if env.spec is not None
        else (source if isinstance(source, str) else type(env.unwrapped).__name__)
    )
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
        obs, reward, terminated, truncated, info = await loop.run_in_executor(
            pool, env.step, completion.text
        )
        env_s += time.monotonic() - t0
        if terminated or truncated:
            breakdown = dict(info.get("reward_breakdown", {}))
            break
    else:
        raise EnvStateError(
            f"{env_id} (seed {seed}) did not end within {max_steps} steps. Give the env a turn "
            "limit (max_turns=...) or raise rollout(max_steps=...)."
        )
    metrics = dict(getattr(env.unwrapped, "episode_metrics", {}) or {})
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
    """Synchronous :func:`rollout_async` (runs its own event loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(rollout_async(env, policy, **kwargs))
    raise EnvStateError(
        "rollout() was called inside a running event loop; use `await rollout_async(...)`."
    )


class _Progress:
    """A tqdm bar on a terminal; a plain line every 10% otherwise (CI logs)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self.done, self.reward_sum = total, enabled, 0, 0.0
        self._bar = None
        self._next_pct = 10
        if enabled:
            import sys

            if sys.stderr.isatty():
                from tqdm import tqdm

                self._bar = tqdm(total=total, desc="episodes", unit="ep")

    def update(self, ep: Episode) -> None:
        self.done += 1
        self.reward_sum += ep.reward
        if not self.enabled:
            return
        mean = self.reward_sum / self.done
        if self._bar is not None:
            self._bar.set_postfix(mean_reward=f"{mean:.3f}")
            self._bar.update(1)
        elif 100 * self.done >= self._next_pct * self.total or self.done == self.total:
            import sys

            print(
                f"episodes {self.done}/{self.total}  mean_reward={mean:.3f}",
                file=sys.stderr,
                flush=True,
            )
            self._next_pct = (100 * self.done // self.total) // 10 * 10 + 10

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
