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

Failures. An episode whose env or policy raises cannot be scored; that is an
infrastructure failure, not the agent's (what the agent wrote never raises: envs turn it
into feedback or a zero reward). The other episodes go on and are kept. The failed one
is played again up to ``retries`` times on a fresh env (the same seeds, so a deterministic
env gives the same episode), and then comes back with ``episode.failure`` set (an
:class:`~agentgym.EpisodeFailure`: the reason, from an :class:`~agentgym.InfraError` or
``env_error`` / ``policy_error``, the message, the call that failed); its env is closed,
never reused. Trainers drop such episodes' groups and benchmarks leave them unscored. A
configuration error (unknown env id, bad kwargs) is never a failed episode: it raises.

Deadlines. With ``episode_timeout_s`` an attempt that runs longer (an env call or a
policy call that never returns: a frozen sandbox, a hung endpoint) fails with reason
``episode_timeout``, naming the call it was stuck in; its env is released as failed (a
blocking env call still running in its thread is abandoned, not interrupted). A rollout
then returns within about ``episode_timeout_s * (retries + 1)`` per wave of
``concurrency`` episodes, whatever its episodes do. A policy whose calls are meant to wait
across trainer steps (T-PPO's pool: a turn is answered steps later) sets the attribute
``waits_across_steps = True``; its calls are then not counted, and the deadline bounds the
episode's own env calls.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from agentgym.errors import ConfigError, EnvStateError, InfraError, UnknownNameError
from agentgym.local_envs import EnvSource, LocalEnv, LocalEnvs, LocalRollout
from agentgym.metrics import FAILED_ATTEMPTS
from agentgym.progress import Progress
from agentgym.registration import resolve_env_id
from agentgym.types import Completion, Episode, EpisodeFailure, SamplingParams, Turn

if TYPE_CHECKING:
    from agentgym.workers import RayEnvWorkers, RemoteEnv

EpisodeCallback = Callable[[Episode], Any | Awaitable[Any]]

#: safety net for envs without limits: a rollout never runs more steps than this
DEFAULT_MAX_STEPS = 10_000

#: reset seeds from here up are held out: training draws below (``train_seed_start``), and
#: ``agentgym eval`` and the trainer's held-out evaluation start here by default
HELD_OUT_SEED_START = 1_000_000


def derive_seed(*parts: Any) -> int:
    """A stable 31-bit seed from any parts (same parts, same seed, on every machine)."""
    h = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & 0x7FFFFFFF


def _check_rollout_args(on_failure: str, retries: int, group_size: int, concurrency: int) -> None:
    """Raise :class:`ConfigError` for a rollout argument out of its range."""
    if on_failure not in ("record", "raise"):
        raise ConfigError(f"on_failure must be 'record' or 'raise', got {on_failure!r}.")
    if retries < 0:
        raise ConfigError(f"retries must be >= 0, got {retries}.")
    if group_size < 1:
        raise ConfigError(f"group_size must be >= 1, got {group_size}.")
    if concurrency < 1:
        raise ConfigError(f"concurrency must be >= 1, got {concurrency}.")


def _out_path(out: str | Path | None) -> Path | None:
    """``out`` as a path whose folder exists (``None`` when no file was asked for)."""
    out_path = Path(out) if out is not None else None
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
    return out_path


def _open_envs(
    env: EnvSource,
    env_kwargs: dict[str, Any] | None,
    n_envs: int,
    env_host: LocalEnvs | RayEnvWorkers | None,
) -> tuple[LocalEnvs | RayEnvWorkers, LocalRollout | _WorkerEnvs]:
    """The env host (a fresh ``LocalEnvs`` when none is given) and the rollout's env leases."""
    host = LocalEnvs(n_envs) if env_host is None else env_host
    if isinstance(host, LocalEnvs):
        return host, LocalRollout(env, env_kwargs, n_envs, host)
    return host, _WorkerEnvs(host, env, env_kwargs, n_envs)


@dataclass
class _Runner:
    """What every episode of one rollout shares: its envs, the policy and the limits."""

    env: EnvSource
    envs: LocalRollout | _WorkerEnvs
    policy: Any
    sampling: SamplingParams
    max_steps: int
    retries: int
    episode_timeout_s: float | None = None
    #: called after each policy reply (the progress bar counts turns as they happen)
    on_reply: Callable[[], None] | None = None

    async def attempt(self, seed: int, sample: int) -> tuple[Episode, BaseException | None]:
        """One play of a task sample: the episode, or a failed one and its error."""
        t_start = time.monotonic()
        try:
            e = await self.envs.acquire()
        except Exception as err:
            # an env that cannot be made as asked (bad kwargs) is the caller's problem
            if _is_config_error(err) or isinstance(err, TypeError | gym.error.Error):
                raise
            return _failed(_env_label(self.env), seed, sample, [], err, "make", t_start), err
        played = _Played()
        played.on_reply = self.on_reply
        ok = False
        try:
            async with asyncio.timeout(self.episode_timeout_s) as deadline:
                if getattr(self.policy, "waits_across_steps", False):
                    played.deadline = deadline
                ep = await _play(
                    e, self.policy, seed, sample, self.sampling, self.max_steps, played
                )
            ok = True
            return ep, None
        except Exception as err:
            if _is_config_error(err):
                raise
            if isinstance(err, TimeoutError) and deadline.expired():
                err = InfraError(
                    f"the episode ran past episode_timeout_s={self.episode_timeout_s:g} s, "
                    f"stuck in {played.where} (a frozen sandbox or a hung endpoint?)",
                    reason="episode_timeout",
                )
            ep = _failed(
                played.env_id or _env_label(self.env),
                seed,
                sample,
                played.turns,
                err,
                played.where,
                t_start,
                task_id=played.task_id,
            )
            return ep, err
        finally:
            self.envs.release(e, ok)

    async def play(self, seed: int, sample: int) -> tuple[Episode, BaseException | None]:
        """Play a task sample, again after a failure up to ``retries`` times."""
        reasons: list[str] = []  # of the failed attempts
        for _ in range(self.retries + 1):
            ep, err = await self.attempt(seed, sample)
            if err is None:
                break
            reasons.append(ep.failure.reason if ep.failure is not None else "error")
        retried = reasons if err is None else reasons[:-1]
        if retried:
            ep.metrics[FAILED_ATTEMPTS] = retried
        return ep, err


@dataclass
class _Finished:
    """The episodes of one rollout as they finish: kept, counted, written and reported."""

    results: list[Episode | None]
    bar: Progress
    out_path: Path | None
    on_episode: EpisodeCallback | None
    reward_sum: float = 0.0
    n_ok: int = 0
    n_failed: int = 0
    turns: int = 0
    errors: list[BaseException] = field(default_factory=list)

    def reply(self) -> None:
        """One more policy reply: shown while the episodes are still running."""
        self.turns += 1
        self.bar.note({"turns": self.turns})

    async def add(self, k: int, ep: Episode, err: BaseException | None) -> None:
        """Keep episode ``k``, count it, append it to ``out``, call back, move the bar."""
        self.results[k] = ep
        if err is not None:
            self.errors.append(err)
            self.n_failed += 1
        else:
            self.n_ok += 1
            self.reward_sum += ep.reward
        if self.out_path is not None:
            with self.out_path.open("a", encoding="utf-8") as f:
                f.write(ep.to_json() + "\n")
        if self.on_episode is not None:
            r = self.on_episode(ep)
            if inspect.isawaitable(r):
                await r
        stats: dict[str, Any] = {"turns": self.turns}
        stats["mean_reward"] = self.reward_sum / max(self.n_ok, 1)
        if self.n_failed:
            stats["failed"] = self.n_failed
        self.bar.update(1, stats)


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
    retries: int = 0,
    on_failure: str = "record",
    episode_timeout_s: float | None = None,
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
        progress: show a progress bar (plain lines when not on a terminal): the episodes
            done, and the policy's turns as they happen (a line every
            :data:`agentgym.progress.DEFAULT_EVERY_S` at most, even inside one long call).
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
        retries: play a failed episode again (on a fresh env, same seeds) up to this
            many times before recording it as failed.
        on_failure: what an episode that cannot be scored does (see "Failures" in the
            module docstring): ``"record"`` (the default) returns it with
            ``episode.failure`` set, after the others; ``"raise"`` re-raises its error
            once every other episode has finished.
        episode_timeout_s: a deadline for each attempt at an episode (see "Deadlines"
            in the module docstring); None: no deadline.

    Raises:
        ConfigError / UnknownNameError: a configuration problem (an unknown env id, bad
            env kwargs): never recorded as a failed episode.
    """
    _check_rollout_args(on_failure, retries, group_size, concurrency)
    if episode_timeout_s is not None and episode_timeout_s <= 0:
        raise ConfigError(f"episode_timeout_s must be > 0 (or None), got {episode_timeout_s}.")
    if seeds is None:
        seeds = list(range(num_tasks if num_tasks is not None else 1))
    seeds = list(seeds)
    if isinstance(env, str):
        env = resolve_env_id(env)  # an unknown id fails here, with "did you mean"
    sampling = sampling or SamplingParams()
    jobs = [(ti, seed, s) for ti, seed in enumerate(seeds) for s in range(group_size)]
    results: list[Episode | None] = [None] * len(jobs)
    if not jobs:
        return []
    n_envs = min(concurrency, len(jobs))
    out_path = _out_path(out)
    own_host = env_host is None
    host, envs = _open_envs(env, env_kwargs, n_envs, env_host)
    bar = Progress(len(jobs), desc="rollout", unit="episode", enabled=progress)
    finished = _Finished(results, bar, out_path, on_episode)
    runner = _Runner(
        env, envs, policy, sampling, max_steps, retries, episode_timeout_s, finished.reply
    )

    async def run_one(k: int) -> None:
        _ti, seed, sample = jobs[k]
        ep, err = await runner.play(seed, sample)
        await finished.add(k, ep, err)

    try:
        await asyncio.gather(*(run_one(k) for k in range(len(jobs))))
    finally:
        bar.close()
        await envs.close()
        if own_host:
            host.close()
    if finished.errors and on_failure == "raise":
        raise finished.errors[0]
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


class _Played:
    """How far an episode got, for the record of one that failed part-way."""

    def __init__(self) -> None:
        self.env_id = ""
        self.task_id: str | None = None
        self.turns: list[Turn] = []
        self.where = "reset"
        #: the attempt's deadline, held still during policy calls (``waits_across_steps``)
        self.deadline: asyncio.Timeout | None = None
        self.on_reply: Callable[[], None] | None = None

    async def ask(self, bound: Any, obs: Any, req: SamplingParams) -> Completion:
        """The policy's reply; with :attr:`deadline` set the call's time is not counted."""
        reply = await self._ask(bound, obs, req)
        if self.on_reply is not None:
            self.on_reply()
        return reply

    async def _ask(self, bound: Any, obs: Any, req: SamplingParams) -> Completion:
        if self.deadline is None or self.deadline.when() is None:
            return await bound(obs, req)
        loop = asyncio.get_running_loop()
        left = self.deadline.when() - loop.time()
        self.deadline.reschedule(None)
        try:
            return await bound(obs, req)
        finally:
            self.deadline.reschedule(loop.time() + left)


async def _play(
    env: LocalEnv | RemoteEnv,
    policy: Any,
    seed: int,
    sample: int,
    sampling: SamplingParams,
    max_steps: int,
    played: _Played,
) -> Episode:
    t_start = time.monotonic()
    env_s = policy_s = 0.0
    played.env_id = env_id = env.env_id
    t0 = time.monotonic()
    obs, info = await env.reset(seed=seed)
    env_s += time.monotonic() - t0
    played.task_id = str(info.get("task_id", seed))
    played.where = "policy"
    bound = await env.bind_policy(policy) if hasattr(policy, "for_env") else policy
    turns = played.turns
    reward, breakdown, terminated, truncated = 0.0, {}, False, False
    for step in range(max_steps):
        req = sampling
        if sampling.seed is not None:
            req = sampling.with_seed(derive_seed(sampling.seed, seed, sample, step))
        played.where = "policy"
        t0 = time.monotonic()
        completion = await played.ask(bound, obs, req)
        policy_s += time.monotonic() - t0
        turns.append(
            Turn(
                messages=tuple(obs),
                completion=completion,
                kind=info.get("turn_kind", "act"),
                conversation=int(info.get("conversation", 0)),
            )
        )
        played.where = "step"
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
    played.where = "step"
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


def _is_config_error(err: BaseException) -> bool:
    """A problem with what the caller asked for (an unknown env id, bad kwargs): raised,
    never recorded as a failed episode."""
    return isinstance(err, ConfigError | UnknownNameError)


def failure_of(err: BaseException, where: str) -> EpisodeFailure:
    """The :class:`EpisodeFailure` record of an error raised at ``where``.

    The reason is the error's own (:class:`~agentgym.InfraError`, a Ray worker's), else
    ``policy_error`` for the policy's calls and ``env_error`` for the env's.
    """
    reason = getattr(err, "reason", None)
    if not isinstance(reason, str) or not reason:
        reason = "policy_error" if where == "policy" else "env_error"
    message = f"{type(err).__name__}: {err}".splitlines()[0][:500]
    detail = "".join(traceback.format_exception(err)[-6:])[-4000:]
    return EpisodeFailure(reason=reason, message=message, where=where, detail=detail)


def _failed(
    env_id: str,
    seed: int,
    sample: int,
    turns: list[Turn],
    err: BaseException,
    where: str,
    t_start: float,
    task_id: str | None = None,
) -> Episode:
    """The record of an episode that could not be scored (reward 0, ``failure`` set)."""
    return Episode(
        env_id=env_id,
        task_id=task_id if task_id is not None else str(seed),
        seed=seed,
        turns=list(turns),
        metrics={"time/start": t_start, "time/end": time.monotonic()},
        sample=sample,
        failure=failure_of(err, where),
    )


def _env_label(env: EnvSource) -> str:
    return env if isinstance(env, str) else getattr(env, "__name__", type(env).__name__)


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
