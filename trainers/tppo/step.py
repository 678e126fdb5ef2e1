"""One T-PPO step of the trainer: extend every response in flight by a window, train the
policy on the window's tokens (Extended GAE for the responses the window cut), train the
critic on the episodes that ended.

:class:`TruncatedSteps` is the step kind (:mod:`agentgym.trainers.steps`) the trainer's
step skeleton runs when ``rollout.truncate_window`` is set. One step::

    rollout   the pool refills its free slots with new groups and extends every
              response by at most ``truncate_window`` tokens (several waves when a turn
              ends inside the window and its episode asks for the next one)
    reward    shaping of the episodes that ended; the samples: one per response
              segment of this step (the tokens this step's policy sampled, the reply
              before them as context), and one per turn of every episode that ended
    train     the policy on the segments (the critic values them: GAE for an episode
              that ended, Extended GAE, ``V(s_l) := V(s_{l-1})``, for one that goes on;
              the critic is not trained on them); then the critic alone on the ended
              episodes' whole turns against their Monte-Carlo returns
    sync      the new adapter goes to the engine

Every token is trained exactly once, in the step whose policy sampled it, with that
policy's log-probs at sampling: the importance ratio of the first (or only) optimizer
step is exactly 1, as in all-sync training. What T-PPO relaxes is the trajectory: a
response's later tokens are sampled by a policy that was updated on its earlier ones
(at most ``rollout.max_policy_lag`` updates apart; ``tppo/lag_*`` report it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agentgym import ConfigError, Episode, episode_solved
from agentgym.trainers import failures
from agentgym.trainers.batch import Sample, episodes_to_samples
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.distributed import DistInfo
from agentgym.trainers.evaluation import episode_summary
from agentgym.trainers.learner import Learner
from agentgym.trainers.rollout_phase import RolloutPhase, shaped_rewards
from agentgym.trainers.steps import Scored
from agentgym.trainers.tppo.pool import TruncatedPool
from agentgym.trainers.tppo.records import Group, Segment
from agentgym.trainers.update import update_critic, update_policy

#: the key of the pool in a checkpoint's trainer state
STATE_KEY = "tppo_pool"


def segment_samples(
    segments: Sequence[Segment], ended: Mapping[int, tuple[float, bool]]
) -> list[Sample]:
    """The policy's samples of one step: one per segment, in slot and turn order.

    Args:
        segments: the step's segments (every rank's, merged).
        ended: ``slot -> (shaped reward, solved)`` of the episodes that ended this step;
            the segments of any other slot bootstrap (their episode goes on).

    The segments of one slot form one GAE chain (``Sample.episode`` is the slot): the
    last carries the reward when the episode ended, else it bootstraps.
    """
    out = []
    for seg in sorted(segments, key=lambda s: (s.slot, s.turn)):
        reward, solved = ended.get(seg.slot, (0.0, False))
        out.append(
            Sample(
                prompt_ids=seg.prompt_ids,
                response_ids=seg.ids,
                advantage=0.0,
                episode=seg.slot,
                sampler_logprobs=seg.logprobs,
                reward=reward,
                positive=solved,
                bootstrap=seg.slot not in ended,
            )
        )
    return out


def critic_samples(episodes: Sequence[Episode], rewards: Sequence[float], tokenizer: Any):
    """The critic's samples of one step: every turn of the episodes that ended, whole
    (prompt as context), each episode one chain ending in its reward."""
    return episodes_to_samples(
        episodes,
        [0.0] * len(episodes),
        tokenizer,
        rewards=rewards,
        positive=[episode_solved(ep) for ep in episodes],
    )


def lag_metrics(lags: Sequence[int], max_lag: int) -> dict[str, float]:
    """The spread of policy versions within the responses that ended: mean, max and the
    share at each lag ``0 .. max_lag``."""
    if not lags:
        return {}
    a = np.asarray(lags)
    out = {"tppo/lag_mean": float(a.mean()), "tppo/lag_max": float(a.max())}
    out.update({f"tppo/lag_share_{k}": float((a == k).mean()) for k in range(max_lag + 1)})
    return out


@dataclass
class WindowRollout:
    """One T-PPO rollout phase: what the pool's window produced (every rank's, merged)
    and the groups whose episodes all ended."""

    done: Any
    groups: list[Group]

    @property
    def failed(self) -> list[Episode]:
        return [ep for _, ep in self.done.ended if ep.failed]

    @property
    def played(self) -> int:
        return len(self.done.ended)


@dataclass
class WindowScored(Scored):
    """T-PPO's scores: the window's segments are ``samples``; the critic trains on
    ``critic_batch``, every turn of the episodes that ended."""

    critic_batch: list[Sample] = field(default_factory=list)


class TruncatedSteps:
    """T-PPO's step kind (see the module docstring; the phases are the trainer's).

    Args:
        cfg: the run's config; rollouts: its task stream and env host; engine: the
            rollout engine the pool drives; learner: what :meth:`train` updates;
            tokenizer: turns episodes into samples; env_ids: the configured envs' ids;
            dist: this process's place in the job.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        rollouts: RolloutPhase,
        engine: Any,
        learner: Learner,
        tokenizer: Any,
        *,
        env_ids: Sequence[str],
        dist: DistInfo,
    ) -> None:
        self.cfg, self.rollouts, self.learner, self.tokenizer = cfg, rollouts, learner, tokenizer
        self.pool = TruncatedPool(
            engine=engine,
            tokenizer=tokenizer,
            env_ids=list(env_ids),
            env_kwargs=rollouts.env_kwargs,
            env_host=rollouts.env_host,
            tasks=rollouts.tasks,
            cfg=cfg,
            dist=dist,
        )

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The pool, under :data:`STATE_KEY` (a collective: every rank calls it)."""
        return {STATE_KEY: self.pool.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Put the pool back from a checkpoint's trainer state: the episodes in flight
        replay their replies and continue their turns from the saved prefixes."""
        if STATE_KEY not in state:
            raise ConfigError(
                "this checkpoint was written without rollout.truncate_window (no T-PPO pool "
                "in it): resume with the run's own config, or start a new run folder."
            )
        self.pool.load_state_dict(state[STATE_KEY])

    def close(self) -> None:
        self.pool.close()

    # ------------------------------------------------------------------ the phases
    def rollout(self, step: int) -> WindowRollout:
        """Refill the pool's free slots and extend every response by one window; the
        tasks of episodes that failed after their retries are quarantined."""
        done, groups = self.pool.exchange(self.pool.advance(step))
        got = WindowRollout(done, groups)
        self.rollouts.quarantine(got.failed)
        return got

    def score(self, got: WindowRollout) -> WindowScored:
        """Shaped rewards of the episodes that ended (no group term:
        ``config.check_config`` refuses ``length_reward_coef``), the window's segment
        samples and the critic's samples."""
        ended = [(slot, ep) for slot, ep in got.done.ended if not ep.failed]
        eps = [ep for _, ep in ended]
        rewards = shaped_rewards(eps, torch.arange(len(eps)), self.cfg).tolist() if eps else []
        by_slot = {
            slot: (r, episode_solved(ep)) for (slot, ep), r in zip(ended, rewards, strict=True)
        }
        samples = segment_samples(got.done.segments, by_slot)
        return WindowScored(
            samples=samples,
            skip=not samples,
            played=eps,
            trained=eps,
            rewards=rewards,
            critic_batch=critic_samples(eps, rewards, self.tokenizer),
        )

    def train(self, scored: Scored) -> dict[str, float]:
        """The policy on the window's segments (the critic values them), then the critic
        alone on the ended episodes. The ``critic/`` figures are those of the critic's own
        batch; the policy's valuation of the segments keeps its advantage statistics as
        ``tppo/segment_advantage_*``."""
        assert isinstance(scored, WindowScored)
        algo = self.cfg.algorithm
        m: dict[str, float] = {}
        if scored.samples:
            m = update_policy(
                self.learner,
                scored.samples,
                algo,
                temperature=self.cfg.rollout.temperature,
            )
        for k in ("critic/advantage_mean", "critic/advantage_std"):
            if k in m:
                m[k.replace("critic/", "tppo/segment_")] = m.pop(k)
        m = {k: v for k, v in m.items() if not k.startswith("critic/")}
        if scored.critic_batch:
            critic = update_critic(self.learner, scored.critic_batch, algo, updates=None)
            m.update({k: v for k, v in critic.items() if k.startswith(("critic/", "losses/value"))})
        return m

    def metrics(
        self, got: WindowRollout, scored: Scored, trained: dict[str, float]
    ) -> dict[str, Any]:
        """The step's ``charts/`` and ``tppo/`` figures, then the update's."""
        assert isinstance(scored, WindowScored)
        done, eps, rewards, samples = got.done, scored.trained, scored.rewards, scored.samples
        m: dict[str, Any] = {
            k.replace("train/", "charts/"): v for k, v in episode_summary(eps, "train").items()
        }
        m["charts/reward"] = float(np.mean(rewards)) if rewards else float("nan")
        m["charts/env_reward"] = float(np.mean([e.reward for e in eps])) if eps else float("nan")
        complete = [[e for e in g.ordered() if not e.failed] for g in got.groups]
        m["charts/groups_completed"] = len(got.groups)
        m["charts/groups_uninformative"] = sum(
            1 for g in complete if len(g) > 1 and len({e.reward for e in g}) == 1
        )
        m["charts/update_skipped"] = int(not samples)
        m.update(failures.failure_counts(got.failed, scored.played))
        m["tppo/active"] = done.active
        m["tppo/ended"] = len(done.ended)
        m["tppo/window_tokens"] = done.tokens
        m["tppo/segments"] = len(samples)
        m["tppo/bootstrapped"] = sum(1 for s in samples if s.bootstrap)
        m["tppo/lag_cuts"] = done.lag_cuts
        m["tppo/retries"] = done.retries
        m["tppo/critic_samples"] = len(scored.critic_batch)
        m["tppo/critic_tokens"] = sum(len(s.response_ids) for s in scored.critic_batch)
        m.update(lag_metrics(done.lags, self.cfg.rollout.max_policy_lag))
        m.update(trained)
        return m
