"""What an algorithm plugs into the trainer's step: how episodes are drawn, scored and
trained (the skeleton that runs the phases is :meth:`~agentgym.trainers.DAPOTrainer.train_step`).

A :class:`StepKind` fills three of the step's phases and names its charts::

    rollout(step) -> Rollout        the step's episodes, generated under the gathered
                                    weights (``failed`` / ``played`` for the failure log)
    score(rollout) -> Scored        rewards, advantages, the samples to train
    train(scored) -> metrics        the learner's update(s) (:mod:`.update`)
    metrics(rollout, scored, trained) -> the step's row (without the timeline's figures)
    state_dict() / load_state_dict() what of it a checkpoint keeps (T-PPO: its responses
                                    in flight; DAPO's: nothing)

:class:`GroupSteps` is DAPO's, and PPO's, VAPO's and A*PO's: groups of ``G`` episodes
per task, dynamic sampling, group advantages (or the critic's GAE, computed inside the
update). T-PPO's truncated rollouts are :class:`~agentgym.trainers.tppo.TruncatedSteps`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from agentgym import ConfigError, Episode, episode_overlong, episode_solved
from agentgym.trainers import failures
from agentgym.trainers.algorithm import group_advantages
from agentgym.trainers.batch import Sample, episodes_to_samples
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.evaluation import episode_summary
from agentgym.trainers.learner import Learner
from agentgym.trainers.rollout_phase import Collected, RolloutPhase, shaped_rewards
from agentgym.trainers.turn_kinds import kind_counts
from agentgym.trainers.update import update_actor_critic


@dataclass
class Scored:
    """What the score phase hands to training and to the samples log.

    Attributes:
        samples: the training samples.
        skip: no update this step (nothing to train, or the round cap says skip); the
            engine then keeps its adapter.
        played: the episodes played this step (the samples log picks from them).
        trained: the episodes trained on, and ``rewards`` their shaped rewards.
    """

    samples: list[Sample]
    skip: bool
    played: list[Episode]
    trained: list[Episode]
    rewards: list[float]


class StepKind(Protocol):
    """How one kind of step draws, scores and trains (see the module docstring)."""

    def rollout(self, step: int) -> Any: ...
    def score(self, rollout: Any) -> Scored: ...
    def train(self, scored: Scored) -> dict[str, float]: ...
    def metrics(self, rollout: Any, scored: Scored, trained: dict[str, float]) -> dict: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


@dataclass
class GroupScored(Scored):
    """:class:`GroupSteps`' scores: the shaped rewards and advantages of the trained
    episodes, and which of them were masked (overlong)."""

    reward_tensor: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    advantages: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    masked: int = 0


class GroupSteps:
    """DAPO's steps (also PPO, VAPO, A*PO): ``G`` episodes per task, dynamic sampling,
    one advantage per episode within its group (or per token from the critic).

    Args:
        cfg: the run's config.
        rollouts: the task stream and env host (:class:`~.rollout_phase.RolloutPhase`).
        policy: the engine's batching policy.
        learner: what :meth:`train` updates.
        tokenizer: turns episodes into token samples.
        apo_values: A*PO's offline values (``algorithm.advantage: apo``), else None.
        say: prints a message (rank 0).
    """

    def __init__(
        self,
        cfg: TrainConfig,
        rollouts: RolloutPhase,
        policy: Any,
        learner: Learner,
        tokenizer: Any,
        *,
        apo_values: Any = None,
        say: Callable[[str], None],
    ) -> None:
        self.cfg, self.rollouts, self.policy, self.learner = cfg, rollouts, policy, learner
        self.tokenizer, self.apo_values, self.say = tokenizer, apo_values, say
        self._capped_steps = 0  # steps whose dynamic sampling ran out of rounds

    def rollout(self, step: int) -> Collected:
        """Rounds of generation until ``batch_tasks`` informative groups (or the cap)."""
        got = self.rollouts.collect(self.policy, step)
        algo = self.cfg.algorithm
        if got.capped and algo.dynamic_sampling:
            self._capped(got, step)
        return got

    def _capped(self, got: Collected, step: int) -> None:
        """Dynamic sampling ran out of rounds: an error, or a message saying what next."""
        algo, r = self.cfg.algorithm, self.cfg.rollout
        msg = (
            f"dynamic sampling: after {got.rounds} generation round(s) only {len(got.kept)}/"
            f"{r.batch_tasks} groups had differing rewards (the rest were all-equal: all "
            "solved or all failed). Raise algorithm.max_generation_rounds or "
            "rollout.tasks_per_round, or make the tasks' difficulty match the model."
        )
        if algo.on_cap == "error":
            raise ConfigError(msg)
        then = "training on what there is" if algo.on_cap == "train" and got.kept else None
        self._capped_steps += 1
        if self._capped_steps > 1:  # said in full once; then a short line
            msg = (
                f"dynamic sampling ran out of rounds again ({len(got.kept)}/{r.batch_tasks} "
                f"informative groups; {self._capped_steps} steps so far)"
            )
        self.say(f"[agentgym train] step {step + 1}: {msg} ({then or 'skipping the update'})")

    def score(self, got: Collected) -> GroupScored:
        """Shaped rewards, group advantages (none with a critic: GAE is per token, in the
        update) and the token samples of the kept groups."""
        cfg, algo = self.cfg, self.cfg.algorithm
        batch = [ep for g in got.kept for ep in g]
        group_ids = torch.tensor([i for i, g in enumerate(got.kept) for _ in g], dtype=torch.long)
        rewards = shaped_rewards(batch, group_ids, cfg) if batch else torch.zeros(0)
        if batch and not algo.uses_critic:
            values = self.apo_values.values_for(batch) if self.apo_values is not None else None
            adv = group_advantages(
                rewards,
                group_ids,
                algo.advantage,
                normalize_std=algo.normalize_std,
                values=values,
            )
        else:
            adv = torch.zeros(len(batch))
        trainable = [
            not (algo.overlong_mask and any(t.completion.truncated for t in ep.turns))
            and not (algo.overlong_episodes == "mask" and episode_overlong(ep))
            for ep in batch
        ]
        samples = episodes_to_samples(
            batch,
            adv.tolist(),
            self.tokenizer,
            trainable=trainable,
            rewards=rewards.tolist(),
            positive=[episode_solved(ep) for ep in batch],
        )
        return GroupScored(
            samples=samples,
            skip=not samples or (got.capped and algo.on_cap == "skip"),
            played=got.episodes,
            trained=batch,
            rewards=rewards.tolist(),
            reward_tensor=rewards,
            advantages=adv,
            masked=sum(1 for t in trainable if not t),
        )

    def train(self, scored: Scored) -> dict[str, float]:
        """The policy update (and the critic's, with one) on the kept groups."""
        if scored.skip:
            return {}
        return update_actor_critic(  # the policy's, and a critic's where there is one
            self.learner,
            scored.samples,
            self.cfg.algorithm,
            temperature=self.cfg.rollout.temperature,
        )

    def metrics(
        self, got: Collected, scored: GroupScored, trained: dict[str, float]
    ) -> dict[str, Any]:
        """The step's ``charts/`` (episodes, groups, engine batches) and the update's."""
        m = {
            k.replace("train/", "charts/"): v
            for k, v in episode_summary(got.episodes, "train").items()
        }
        rewards, adv = scored.reward_tensor, scored.advantages
        m["charts/reward"] = float(rewards.mean()) if len(rewards) else float("nan")
        m["charts/env_reward"] = (
            float(np.mean([e.reward for e in got.episodes])) if got.episodes else float("nan")
        )
        m["charts/advantage_abs_mean"] = float(adv.abs().mean()) if len(adv) else 0.0
        m["charts/groups_kept"] = len(got.kept)
        m["charts/groups_filtered"] = got.groups_dropped
        m["charts/groups_generated"] = got.groups_seen
        m["charts/groups_failed"] = got.groups_failed
        m.update(failures.failure_counts(got.failed, got.episodes))
        m["charts/generation_rounds"] = got.rounds
        m["charts/hit_round_cap"] = int(got.capped)
        m["charts/update_skipped"] = int(scored.skip)
        m["charts/masked_episodes"] = scored.masked
        m.update(kind_counts(scored.samples))  # act vs summary turns and tokens trained
        sizes = got.batches
        m["charts/engine_batches"] = len(sizes)
        m["charts/engine_batch_mean"] = float(np.mean(sizes)) if sizes else 0.0
        m.update(trained)
        return m

    def state_dict(self) -> dict[str, Any]:
        """Nothing of its own outlives a step (the task stream is the rollouts')."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore (see :meth:`state_dict`)."""

    def close(self) -> None:
        """Nothing of its own: the trainer closes the rollouts and the policy."""
