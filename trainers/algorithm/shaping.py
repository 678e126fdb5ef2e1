"""Reward shaping before advantages: DAPO's overlong punishment, Kimi's length reward,
and dynamic sampling's filter of groups that carry no signal."""

from __future__ import annotations

import torch
from torch import Tensor

from agentgym import ConfigError
from agentgym.trainers.algorithm.groups import group_index


def informative_groups(rewards: Tensor, group_ids: Tensor, *, tol: float = 0.0) -> Tensor:
    """Dynamic sampling's keep-mask: True for samples whose group's rewards differ.

    A group whose rewards are all equal (all correct, all wrong) gives every sample a
    zero advantage, hence no gradient; DAPO drops such groups and samples more tasks.
    Groups of one sample are never informative.

    Args:
        rewards: ``[N]``.
        group_ids: ``[N]``.
        tol: rewards closer than this count as equal (max - min <= tol).
    """
    if rewards.numel() == 0:
        return torch.zeros(0, dtype=torch.bool)
    r = rewards.to(torch.float64)
    index, k = group_index(group_ids)
    hi = torch.full((k,), -torch.inf, dtype=r.dtype).scatter_reduce(0, index, r, reduce="amax")
    lo = torch.full((k,), torch.inf, dtype=r.dtype).scatter_reduce(0, index, r, reduce="amin")
    return (hi - lo > tol)[index]


def overlong_penalty(lengths: Tensor, max_length: int, cache_length: int) -> Tensor:
    """DAPO's soft overlong punishment, added to the reward (eq. 13 of the paper).

    With ``L_max = max_length`` and ``L_cache = cache_length``::

        0                                   if |y| <= L_max - L_cache
        ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
        -1                                  if |y| > L_max

    Args:
        lengths: ``[N]`` response lengths in tokens.
        max_length: ``L_max``.
        cache_length: ``L_cache`` (the width of the linear ramp), ``0 < L_cache <= L_max``.
    """
    if not 0 < cache_length <= max_length:
        raise ConfigError(
            f"overlong cache_length must be in (0, max_length={max_length}], got {cache_length}."
        )
    y = lengths.to(torch.float64)
    start = max_length - cache_length
    ramp = (start - y) / cache_length
    out = torch.where(y <= start, torch.zeros_like(y), ramp)
    out = torch.where(y > max_length, torch.full_like(y, -1.0), out)
    return out.to(torch.float32)


def length_reward(lengths: Tensor, correct: Tensor, group_ids: Tensor) -> Tensor:
    """Kimi k1.5's group-relative length reward (section 2.3.3 of arXiv 2501.12599).

    Within a group with shortest length ``min`` and longest ``max``::

        lambda_i = 0.5 - (len_i - min) / (max - min)
        reward_i = lambda_i            if sample i is correct
                   min(0, lambda_i)    otherwise

    Short correct answers are promoted, long ones penalised; wrong answers are never
    rewarded for being short. A group whose lengths are all equal gets 0.

    Args:
        lengths: ``[N]`` response lengths in tokens.
        correct: ``[N]`` booleans (or 0/1).
        group_ids: ``[N]``.
    """
    if lengths.numel() == 0:
        return torch.zeros(0, dtype=torch.float32)
    y = lengths.to(torch.float64)
    index, k = group_index(group_ids)
    hi = torch.full((k,), -torch.inf, dtype=y.dtype).scatter_reduce(0, index, y, reduce="amax")
    lo = torch.full((k,), torch.inf, dtype=y.dtype).scatter_reduce(0, index, y, reduce="amin")
    span = (hi - lo)[index]
    lam = torch.where(span > 0, 0.5 - (y - lo[index]) / span.clamp(min=1e-12), torch.zeros_like(y))
    out = torch.where(correct.bool(), lam, lam.clamp(max=0.0))
    return out.to(torch.float32)
