"""VAPO's value pretraining: the critic learns the warm-start policy's values before the
policy's first update, so that its first advantages are not those of a critic that says
0 everywhere (:func:`pretrain_critic`; the critic itself is :mod:`.critic`)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

from agentgym import Progress, episode_solved
from agentgym.trainers.batch import episodes_to_samples
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.learner import Learner
from agentgym.trainers.logging import JsonlWriter
from agentgym.trainers.rollout_phase import RolloutPhase, group_episodes, shaped_rewards
from agentgym.trainers.update import update_critic


def pretrain_critic(
    cfg: TrainConfig,
    learner: Learner,
    rollouts: RolloutPhase,
    policy: Any,
    tokenizer: Any,
    *,
    log: JsonlWriter,
    say: Callable[[str], None],
    progress: bool = False,
    weights: Callable[[], AbstractContextManager[Any]] | None = None,
) -> list[dict[str, float]]:
    """VAPO's value pretraining, before the first policy update: up to
    ``critic.pretrain_steps`` rounds of rollouts from the warm-start policy, each training
    the critic alone (:func:`~.update.update_critic`) on every episode generated (all of
    a group's episodes, informative or not: the critic learns from solved and failed tasks
    alike). Stops early once the critic's explained variance on a round reaches
    ``critic.pretrain_explained_variance``. Writes one metrics row per round to ``log``
    (the run's ``critic_pretrain.jsonl``), says why it stopped, and returns the rows.

    The rounds draw tasks from the run's task stream (the policy then trains on the tasks
    after them) and leave the policy and its learning-rate warm-up untouched. ``weights``
    gives what a rollout holds (:func:`~.learner.weights_for`; default: the learner's
    generation model).
    """
    rows: list[dict[str, float]] = []
    say(
        f"[agentgym train] value pretraining: up to {cfg.critic.pretrain_steps} round(s) of "
        "rollouts train the critic alone before the first policy update "
        "(critic.pretrain_steps)."
    )
    bar = Progress(cfg.critic.pretrain_steps, desc="value pretraining", unit="round",
                   enabled=progress)  # fmt: skip
    try:
        hold = weights or learner.generation
        _pretrain_rounds(cfg, learner, rollouts, policy, tokenizer, log, bar, rows, hold)
    finally:
        bar.close()
    ev = rows[-1]["critic/explained_variance"] if rows else float("nan")
    why = (
        "reached critic.pretrain_explained_variance"
        if ev >= cfg.critic.pretrain_explained_variance
        else "ran critic.pretrain_steps"
    )
    say(
        f"[agentgym train] value pretraining: {len(rows)} round(s), explained variance "
        f"{ev:.3f} ({why})"
    )
    return rows


def _pretrain_rounds(
    cfg: TrainConfig,
    learner: Learner,
    rollouts: RolloutPhase,
    policy: Any,
    tokenizer: Any,
    log: JsonlWriter,
    bar: Progress,
    rows: list[dict[str, float]],
    hold: Callable[[], AbstractContextManager[Any]],
) -> None:
    """The rounds of :func:`pretrain_critic`, each row appended to ``rows`` and ``log``."""
    for i in range(cfg.critic.pretrain_steps):
        with hold():
            got = rollouts.collect(policy, 0)
        episodes = [ep for g in group_episodes(got.episodes) for ep in g]
        if not episodes:
            bar.update(1)
            continue
        group_ids = torch.tensor(
            [i for i, g in enumerate(group_episodes(episodes)) for _ in g], dtype=torch.long
        )
        rewards = shaped_rewards(episodes, group_ids, cfg)
        samples = episodes_to_samples(
            episodes,
            [0.0] * len(episodes),
            tokenizer,
            rewards=rewards.tolist(),
            positive=[episode_solved(ep) for ep in episodes],
        )
        m = update_critic(learner, samples, cfg.algorithm, updates=cfg.critic.pretrain_updates)
        row = {
            "pretrain_step": i + 1,
            "episodes": len(episodes),
            "reward": float(rewards.mean()),
            **{k: v for k, v in m.items() if k.startswith(("critic/", "losses/value"))},
        }
        rows.append(row)
        log.write(row)
        bar.update(1, {"explained_variance": row["critic/explained_variance"]})
        if row["critic/explained_variance"] >= cfg.critic.pretrain_explained_variance:
            break
