"""``rollout``: the one place that runs environments against a policy.

Many episodes run at once on one asyncio event loop. Policy calls are awaited (engines
batch the concurrent calls); blocking environment work (``make``, ``reset``, ``step``,
which may grade, run sandboxes or tests) runs in a thread pool so it never stalls the
loop. For group-based RL each task (a ``reset`` seed) is played ``group_size`` times.
Where the environment work runs is one argument, ``env_host``: a
:class:`~agentgym.local_envs.LocalEnvs` (this process's threads, optionally keeping env
instances between rollouts; a fresh one per call by default) or a
:class:`~agentgym.workers.RayEnvWorkers` (Ray actors; the same episodes, see
``docs/ray.md``).

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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgym.errors import ConfigError, EnvStateError
from agentgym.local_envs import EnvSource, LocalEnv, LocalEnvs, LocalRollout
from agentgym.progress import Progress
from agentgym.types import Episode, SamplingParams, Turn

if TYPE_CHECKING:
    from agentgym.workers import RayEnvWorkers, RemoteEnv

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
    env_host: LocalEnvs | RayEnvWorkers | None = None,
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
        env_host: where env ``make``/``reset``/``step`` run. A
            :class:`~agentgym.local_envs.LocalEnvs`: this process's threads, and with
            ``keep=True`` env instances kept between rollouts (a trainer keeps one for
            its whole run, so envs are made once rather than every step). A
            :class:`~agentgym.workers.RayEnvWorkers`: Ray actors (``env`` is then an id
            or a picklable factory; env instances stay cached in the workers; env-bound
            policies (``for_env``) are bound and called in the worker); the episodes
            are the same. ``None``: a fresh ``LocalEnvs`` of ``concurrency`` threads,
            closed when the rollout ends.
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
    own_host = env_host is None
    host = LocalEnvs(n_envs) if env_host is None else env_host
    envs: LocalRollout | _WorkerEnvs
    if isinstance(host, LocalEnvs):
        envs = LocalRollout(env, env_kwargs, n_envs, host)
    else:
        envs = _WorkerEnvs(host, env, env_kwargs, n_envs)
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
        if own_host:
            host.close()
    return [ep for ep in results if ep is not None]


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
    env: LocalEnv | RemoteEnv,
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
    keyword arguments, ``env_host=`` included."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(rollout_async(env, policy, **kwargs))
    raise EnvStateError(
        "rollout() was called inside a running event loop; use `await rollout_async(...)`."
    )
