"""T-PPO (arXiv 2506.15050): truncated rollouts that continue across steps, trained with
Extended GAE; switched on by ``rollout.truncate_window`` (``algorithm.name=tppo``).

* :mod:`.config`: which settings T-PPO works with (checked when a config loads);
* :mod:`.records`: what a step produced and what a checkpoint keeps of the pool;
* :mod:`.pool`: :class:`~.pool.TruncatedPool`, the episodes in flight, one window of
  tokens per response per step;
* :mod:`.step`: :class:`~.step.TruncatedSteps`, one T-PPO step of the trainer (the
  policy trains on every response's window, the critic on the episodes that ended).

Nothing is imported here, so that :mod:`agentgym.trainers.config` can check a config
without loading torch.
"""
