"""Group bookkeeping shared by the estimators and the filters: dense group indices, sums."""

from __future__ import annotations

import torch
from torch import Tensor


def group_index(group_ids: Tensor) -> tuple[Tensor, int]:
    """Dense group indices ``0..K-1`` for arbitrary integer labels, and ``K``."""
    _, inverse = torch.unique(group_ids, return_inverse=True)
    return inverse, int(inverse.max().item()) + 1 if inverse.numel() else 0


def group_sum(values: Tensor, index: Tensor, k: int) -> Tensor:
    """Per-group sums of ``values`` (``index`` from :func:`group_index`)."""
    return torch.zeros(k, dtype=values.dtype, device=values.device).index_add_(0, index, values)


def group_stats(rewards: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sample group mean, unbiased group std (0 for groups of one) and group size."""
    rewards = rewards.to(torch.float64)
    index, k = group_index(group_ids)
    ones = torch.ones_like(rewards)
    size = group_sum(ones, index, k)
    mean = group_sum(rewards, index, k) / size
    sq = group_sum((rewards - mean[index]) ** 2, index, k)
    var = torch.where(size > 1, sq / (size - 1).clamp(min=1), torch.zeros_like(sq))
    return mean[index], var.sqrt()[index], size[index]


def group_max(values: Tensor, group_ids: Tensor) -> Tensor:
    """Per-sample maximum of its group."""
    index, k = group_index(group_ids)
    v = values.to(torch.float64)
    best = torch.full((k,), -torch.inf, dtype=v.dtype).scatter_reduce(0, index, v, reduce="amax")
    return best[index]
