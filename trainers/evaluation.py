"""Held-out evaluation and the episode summaries that the trainer logs.

* :func:`evaluate_async`: one episode per held-out seed and env, with any policy;
* :func:`episode_summary` / :func:`eval_metrics`: mean reward, accuracy (the env's own,
  :func:`agentgym.episode_accuracy`), policy tokens and truncation share, under a prefix;
* :func:`eval_table`: the Markdown before/after table a run prints at its end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentgym import (
    ConfigError,
    Episode,
    Progress,
    SamplingParams,
    episode_accuracy,
    episode_overlong,
    episode_tokens,
    rollout_async,
    summary_tokens,
    working_context,
)
from agentgym.trainers.config import EnvSpec
from agentgym.trainers.env_setup import env_kwargs, resolve_envs


def episode_summary(played: Sequence[Episode], prefix: str) -> dict[str, float]:
    """Mean reward, accuracy (where reported), policy tokens, truncation share, over the
    scored episodes; episodes that failed (infrastructure) are only counted
    (``<prefix>/failed``). Next to them, what memory summaries cost: the share of
    episodes cut off by an env limit before their answer (``overlong_share``), the
    working context (each episode's largest prompt, averaged: ``working_context_mean``)
    and, with summary turns, conversations and summary tokens per episode."""
    episodes = [e for e in played if not e.failed]
    failed = len(played) - len(episodes)
    if not episodes:
        return {f"{prefix}/failed": float(failed)} if failed else {}
    accs = [a for a in (episode_accuracy(e) for e in episodes) if a is not None]
    toks = [episode_tokens(e) for e in episodes]
    out = {
        f"{prefix}/reward": float(np.mean([e.reward for e in episodes])),
        f"{prefix}/response_tokens_mean": float(np.mean(toks)),
        f"{prefix}/response_tokens_max": float(np.max(toks)),
        f"{prefix}/truncated_share": float(
            np.mean([any(t.completion.truncated for t in e.turns) for e in episodes])
        ),
        f"{prefix}/episodes": float(len(episodes)),
        f"{prefix}/overlong_share": float(np.mean([episode_overlong(e) for e in episodes])),
        f"{prefix}/working_context_mean": float(np.mean([working_context(e) for e in episodes])),
    }
    if any(t.kind == "summary" for e in episodes for t in e.turns):
        out[f"{prefix}/conversations_mean"] = float(
            np.mean([e.num_conversations for e in episodes])
        )
        out[f"{prefix}/summary_tokens_mean"] = float(np.mean([summary_tokens(e) for e in episodes]))
    if accs:
        out[f"{prefix}/accuracy"] = float(np.mean(accs))
    if failed:
        out[f"{prefix}/failed"] = float(failed)
    return out


def env_labels(env_ids: Sequence[str]) -> list[str]:
    """Each env's name in metric keys: its short id (``BalancedMath-v0``), followed by
    ``#k`` (its place in ``envs``, from 1) where several envs share that id (one env under
    two sets of arguments), so that no env's figures overwrite another's."""
    short = [env_id.split("/")[-1] for env_id in env_ids]
    return [s if short.count(s) == 1 else f"{s}#{i + 1}" for i, s in enumerate(short)]


def eval_metrics(env_ids: Sequence[str], per_env: Sequence[Sequence[Episode]]) -> dict[str, float]:
    """Summary metrics under ``eval/`` (and ``eval/<EnvName>/`` with several envs, named
    by :func:`env_labels`)."""
    episodes = [ep for eps in per_env for ep in eps]
    metrics = episode_summary(episodes, "eval")
    if len(env_ids) > 1:
        for label, eps in zip(env_labels(env_ids), per_env, strict=True):
            metrics.update(episode_summary(eps, f"eval/{label}"))
    return metrics


async def evaluate_async(
    policy: Any,
    envs: Sequence[EnvSpec],
    tokenizer: Any,
    *,
    sampling: SamplingParams,
    num_tasks: int | None = None,
    seed_start: int = 0,
    seeds: Sequence[int] | None = None,
    concurrency: int = 256,
    env_host: Any = None,
    retries: int = 2,
    progress: bool = False,
    episode_timeout_s: float | None = None,
    label: str = "eval",
) -> tuple[dict[str, float], list[list[Episode]]]:
    """One episode per held-out seed and env.

    Args:
        seeds: the held-out seeds; default ``seed_start .. seed_start + num_tasks - 1``.
        env_host: where env work runs (:class:`agentgym.LocalEnvs` or
            :class:`agentgym.RayEnvWorkers`; ``None``: new threads and envs per call).
        retries: replays of an episode that failed for infrastructure reasons; one
            that still fails is left out of the metrics and counted (``eval/failed``).
        progress: show an ``eval`` progress bar over the episodes (plain lines in logs).
        episode_timeout_s: a deadline for each attempt at an episode (``rollout``'s).
        label: the progress bar's name (which evaluation this is).

    Returns:
        summary metrics under ``eval/`` and the episodes, one list per env.
    """
    if seeds is None:
        if num_tasks is None:
            raise ConfigError("evaluate_async needs seeds or num_tasks.")
        seeds = range(seed_start, seed_start + num_tasks)
    ids = resolve_envs(envs)
    seeds = list(seeds)
    bar = Progress(len(seeds) * len(ids), desc=label, unit="episode", enabled=progress)
    try:
        results = await _play_all(
            ids,
            envs,
            policy,
            tokenizer,
            seeds,
            sampling,
            bar,
            concurrency=concurrency,
            env_host=env_host,
            retries=retries,
            episode_timeout_s=episode_timeout_s,
        )
    finally:
        bar.close()
    per_env = [list(eps) for eps in results]
    return eval_metrics(ids, per_env), per_env


async def _play_all(
    ids: Sequence[str],
    envs: Sequence[EnvSpec],
    policy: Any,
    tokenizer: Any,
    seeds: list[int],
    sampling: SamplingParams,
    bar: Progress,
    **kw: Any,
) -> list[list[Episode]]:
    """One episode per seed of every env, concurrently; ``bar`` counts them."""
    return await asyncio.gather(
        *(
            rollout_async(
                env_id,
                policy,
                seeds=seeds,
                group_size=1,
                sampling=sampling,
                env_kwargs=env_kwargs(spec, tokenizer),
                on_episode=lambda _ep: bar.update(1),
                **kw,
            )
            if seeds
            else _no_episodes()
            for env_id, spec in zip(ids, envs, strict=True)
        )
    )


async def _no_episodes() -> list[Episode]:
    return []


def eval_table(before: dict[str, Any], after: dict[str, Any]) -> str:
    """A Markdown before/after table of held-out metrics."""
    rows = [
        ("accuracy", "eval/accuracy", "{:.1%}"),
        ("mean reward", "eval/reward", "{:.3f}"),
        ("mean response tokens", "eval/response_tokens_mean", "{:.1f}"),
        ("truncated share", "eval/truncated_share", "{:.1%}"),
    ]
    lines = [
        f"| held-out ({int(before.get('eval/episodes', 0))} tasks) | step {before['step']} | step {after['step']} | ratio |",
        "|---|---|---|---|",
    ]
    for label, key, fmt in rows:
        a, b = before.get(key), after.get(key)
        if a is None or b is None:
            continue
        ratio = f"{b / a:.2f}" if a else "-"
        lines.append(f"| {label} | {fmt.format(a)} | {fmt.format(b)} | {ratio} |")
    return "\n".join(lines)
