"""One T-PPO step of the trainer: extend every response in flight by a window, train the
policy on the window's tokens (Extended GAE for the responses the window cut), train the
critic on the episodes that ended.

The trainer (:class:`~agentgym.trainers.DAPOTrainer`) hands its step to
:class:`TruncatedSteps` when ``rollout.truncate_window`` is set. One step::

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
from typing import Any

import numpy as np
import torch

from agentgym import ConfigError, Episode, episode_solved
from agentgym.trainers import failures
from agentgym.trainers.batch import Sample, episodes_to_samples
from agentgym.trainers.evaluation import episode_summary
from agentgym.trainers.rollout_phase import shaped_rewards
from agentgym.trainers.timeline import Timeline
from agentgym.trainers.tppo.pool import TruncatedPool
from agentgym.trainers.tppo.records import Group, Segment

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


class TruncatedSteps:
    """The T-PPO steps of one trainer (see the module docstring).

    Args:
        trainer: the :class:`~agentgym.trainers.DAPOTrainer` whose engine, learner,
            task stream and env host the pool uses.
    """

    def __init__(self, trainer: Any) -> None:
        self.t = t = trainer
        self.pool = TruncatedPool(
            engine=t.engine,
            tokenizer=t.tokenizer,
            env_ids=t.env_ids,
            env_kwargs=t.rollouts.env_kwargs,
            env_host=t.rollouts.env_host,
            tasks=t.rollouts.tasks,
            cfg=t.cfg,
            dist=t.dist,
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

    # ------------------------------------------------------------------ one step
    def step(self) -> dict[str, Any]:
        """One T-PPO step; returns the step's metrics (the trainer's ``train_step``)."""
        t, cfg = self.t, self.t.cfg
        tl = Timeline()
        if t.heartbeat is not None:
            t.heartbeat.step_started()
        with tl.phase("wake"):
            t.engine.wake()
        with tl.phase("rollout"), tl.watch(t.engine), t.learner.generation():
            mine = self.pool.advance(t.step)
            done, groups = self.pool.exchange(mine)
        failed = [ep for _, ep in done.ended if ep.failed]
        ended = [(slot, ep) for slot, ep in done.ended if not ep.failed]
        if failed:
            self._failed(failed, groups, len(done.ended))

        with tl.phase("reward"):
            eps = [ep for _, ep in ended]
            rewards = (
                shaped_rewards(eps, torch.arange(len(eps)), cfg).tolist() if eps else []
            )  # no group term: config.check_config refuses length_reward_coef
            by_slot = {
                slot: (r, episode_solved(ep)) for (slot, ep), r in zip(ended, rewards, strict=True)
            }
            samples = segment_samples(done.segments, by_slot)
            values_batch = critic_samples(eps, rewards, t.tokenizer)

        t._phase("train")
        with tl.phase("sleep"):
            t.engine.sleep()
        policy_m: dict[str, float] = {}
        critic_m: dict[str, float] = {}
        with tl.phase("train"):
            if samples:
                policy_m = t.learner.update(samples, train_critic=False)
            if values_batch:
                updates = t.learner.updates
                critic_m = t.learner.update(values_batch, policy=False)
                t.learner.updates = updates  # the policy's warm-up counts its own steps
        t._phase("sync")
        with tl.phase("sync"):
            if samples and not t.engine.shares_weights:
                t.engine.load_adapter(t.learner.adapter_state())
        t.step += 1
        m = self._metrics(done, eps, rewards, groups, samples, values_batch, policy_m, critic_m)
        m.update(tl.metrics())
        for row in tl.to_records(t.step, t.origin):
            t.timeline_log.write(row)
        log = getattr(t, "samples_log", None)
        if log is not None and eps:
            log.write_step(t.step, eps, eps, rewards)
        return m

    def _failed(self, failed: list[Episode], groups: list[Group], played: int) -> None:
        """Record the episodes that failed after their retries and quarantine their
        tasks; stop the run when too many failed."""
        t = self.t
        for ep in failed:
            t.rollouts.quarantined.add((ep.env_id, int(ep.seed or 0)))
        if t.dist.is_main:
            t._say(failures.record(t.out, t.step + 1, failed))
        failures.check_share(t.step + 1, failed, played, t.cfg.rollout.max_failed_share, t.out)

    def _metrics(
        self,
        done: Any,
        eps: list[Episode],
        rewards: list[float],
        groups: list[Group],
        samples: list[Sample],
        values_batch: list[Sample],
        policy_m: dict[str, float],
        critic_m: dict[str, float],
    ) -> dict[str, Any]:
        m: dict[str, Any] = {"step": self.t.step}
        m.update(
            {k.replace("train/", "charts/"): v for k, v in episode_summary(eps, "train").items()}
        )
        m["charts/reward"] = float(np.mean(rewards)) if rewards else float("nan")
        m["charts/env_reward"] = float(np.mean([e.reward for e in eps])) if eps else float("nan")
        complete = [[e for e in g.ordered() if not e.failed] for g in groups]
        m["charts/groups_completed"] = len(groups)
        m["charts/groups_uninformative"] = sum(
            1 for g in complete if len(g) > 1 and len({e.reward for e in g}) == 1
        )
        m["charts/update_skipped"] = int(not samples)
        m.update(failures.failure_counts([ep for _, ep in done.ended if ep.failed]))
        m["tppo/active"] = done.active
        m["tppo/ended"] = len(done.ended)
        m["tppo/window_tokens"] = done.tokens
        m["tppo/segments"] = len(samples)
        m["tppo/bootstrapped"] = sum(1 for s in samples if s.bootstrap)
        m["tppo/lag_cuts"] = done.lag_cuts
        m["tppo/retries"] = done.retries
        m["tppo/critic_samples"] = len(values_batch)
        m["tppo/critic_tokens"] = sum(len(s.response_ids) for s in values_batch)
        m.update(lag_metrics(done.lags, self.t.cfg.rollout.max_policy_lag))
        m.update(policy_m)
        # the critic's figures are those of its own batch (the ended episodes, against
        # their returns); the policy's valuation of the segments keeps its advantages
        for k in ("critic/advantage_mean", "critic/advantage_std"):
            if k in policy_m:
                m[k.replace("critic/", "tppo/segment_")] = m.pop(k)
        for k in [k for k in m if k.startswith("critic/")]:
            del m[k]
        m.update({k: v for k, v in critic_m.items() if k.startswith(("critic/", "losses/value"))})
        return m
