"""Per-token helpers on logits: selected log-probs, entropy, masked means."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def selected_logprobs(logits: Tensor, targets: Tensor, temperature: float = 1.0) -> Tensor:
    """``log softmax(logits / temperature)`` at ``targets``: ``[B, T, V], [B, T] -> [B, T]``."""
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logz


def token_entropy(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Entropy of each position's next-token distribution: ``[B, T, V] -> [B, T]``."""
    if temperature != 1.0:
        logits = logits / temperature
    logp = F.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` where ``mask`` is 1 (0 when the mask is empty)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1)
