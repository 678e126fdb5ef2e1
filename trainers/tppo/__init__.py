"""T-PPO (arXiv 2506.15050): truncated rollouts that continue across steps, trained with
Extended GAE; switched on by ``rollout.truncate_window`` (``algorithm.name=tppo``).

* :mod:`.config`: which settings T-PPO works with (:func:`check_config`, called when a
  trainer config loads);
* :mod:`.records`: what a step produced and what a checkpoint keeps of the pool;
* :mod:`.pool`: :class:`TruncatedPool`, the episodes in flight, one window of tokens per
  response per step;
* :mod:`.step`: :class:`TruncatedSteps`, one T-PPO step of the trainer (the policy
  trains on every response's window, the critic on the episodes that ended).

Names load on first use, so that :mod:`agentgym.trainers.config` can check a config
without importing the pool.
"""

from __future__ import annotations

from agentgym import lazy_exports

_LAZY = {
    "check_config": "agentgym.trainers.tppo.config",
    "TruncatedPool": "agentgym.trainers.tppo.pool",
    "TruncatedSteps": "agentgym.trainers.tppo.step",
    "segment_samples": "agentgym.trainers.tppo.step",
    "critic_samples": "agentgym.trainers.tppo.step",
    "lag_metrics": "agentgym.trainers.tppo.step",
    "Segment": "agentgym.trainers.tppo.records",
    "RankStep": "agentgym.trainers.tppo.records",
    "TurnRecord": "agentgym.trainers.tppo.records",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = sorted(_LAZY)
