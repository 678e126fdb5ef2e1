"""Which settings T-PPO (``rollout.truncate_window``) works with: :func:`check_config`
refuses, at config load, the combinations that are not wired, saying what to change."""

from __future__ import annotations

from typing import Any

from agentgym import ConfigError


def check_config(cfg: Any) -> None:
    """Raise :class:`~agentgym.ConfigError` for a T-PPO setting that cannot work (``cfg``
    is a :class:`~agentgym.trainers.TrainConfig`; nothing is checked without T-PPO)."""
    r, algo = cfg.rollout, cfg.algorithm
    if algo.name == "tppo" and r.truncate_window is None:
        raise ConfigError(
            "algorithm.name=tppo extends every response by at most a window of tokens per "
            "step: set rollout.truncate_window (T-PPO used 8K of a 24K cap, a third of "
            f"rollout.max_tokens: rollout.truncate_window={max(1, r.max_tokens // 3)})."
        )
    if r.truncate_window is None:
        return
    if not algo.uses_critic:
        raise ConfigError(
            "rollout.truncate_window (T-PPO) trains responses the window cut with Extended "
            "GAE, which needs a critic: set algorithm.name=tppo (or algorithm.advantage=gae)."
        )
    if algo.length_reward_coef > 0:
        raise ConfigError(
            "algorithm.length_reward_coef compares the lengths within a group, which T-PPO "
            "only knows once every episode of the group ended, after most of their tokens "
            "were trained: set it to 0 (algorithm.overlong_penalty shapes one episode alone)."
        )
    if algo.overlong_mask:
        raise ConfigError(
            "algorithm.overlong_mask drops overlong episodes from the batch, but T-PPO trains "
            "a response window by window before it is known to be overlong: use "
            "algorithm.overlong_penalty instead."
        )
    if algo.router_replay:
        raise ConfigError(
            "algorithm.router_replay is not wired to T-PPO's segments (a response continued "
            "over several steps); turn one of them off."
        )
    if r.rollout_workers > 0:
        raise ConfigError(
            "T-PPO keeps episodes in flight between steps on this process's event loop; "
            "with Ray env workers (rollout.rollout_workers > 0) that is not built yet: set "
            "rollout.rollout_workers=0."
        )
