"""Per-token helpers on logits: selected log-probs, entropy, masked means.

Logits split over the vocabulary (a DTensor sharded on its last dimension: the LM head's
output under tensor parallelism with loss parallelism, as torchtitan's ``loss_parallel``)
are taken as they are: each rank reduces its slice of the vocabulary and the per-token
maxima, sums and target logits are all-reduced over the tensor-parallel ranks (their
gradient passes back unchanged, each rank holding the whole per-token loss), so no rank
ever holds the whole ``[B, T, V]``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor


def selected_logprobs(logits: Tensor, targets: Tensor, temperature: float = 1.0) -> Tensor:
    """``log softmax(logits / temperature)`` at ``targets``: ``[B, T, V], [B, T] -> [B, T]``."""
    if temperature != 1.0:
        logits = logits / temperature
    if _vocab_split(logits):
        return _split_selected_logprobs(logits, targets)
    logz = torch.logsumexp(logits, dim=-1)
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logz


def logprobs_and_entropy(
    logits: Tensor, targets: Tensor, temperature: float = 1.0
) -> tuple[Tensor, Tensor]:
    """:func:`selected_logprobs` (with its gradient) and the entropy of each position
    (without one), sharing the normaliser ``log Z``: the entropy's log-softmax is
    ``z - log Z`` with the ``log Z`` the log-probs already needed, instead of a second
    log-softmax over ``[B, T, V]`` (:func:`token_entropy`). The log-probs are exactly
    :func:`selected_logprobs`'."""
    if temperature != 1.0:
        logits = logits / temperature
    if _vocab_split(logits):
        return _split_selected_logprobs(logits, targets), _split_entropy(logits.detach())
    logz = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logz
    with torch.no_grad():
        logp_all = logits.detach().float() - logz.detach().float().unsqueeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def token_entropy(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Entropy of each position's next-token distribution: ``[B, T, V] -> [B, T]``."""
    if temperature != 1.0:
        logits = logits / temperature
    if _vocab_split(logits):
        return _split_entropy(logits)
    logp = F.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


# ----------------------------------------------------------------------------- vocab split


def _vocab_split(logits: Tensor) -> bool:
    """Whether ``logits`` is a DTensor sharded over its last (vocabulary) dimension."""
    placements = getattr(logits, "placements", None)
    if not placements or len(placements) != 1:
        return False
    dim = getattr(placements[0], "dim", None)
    return dim is not None and dim in (-1, logits.dim() - 1)


class _SumOverRanks(torch.autograd.Function):
    """All-reduce (sum) in the forward pass; the gradient passes unchanged (every rank
    back-propagates the same, whole loss: Megatron's reduce from the model-parallel
    region)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, group: Any) -> Tensor:
        import torch.distributed as dist

        out = x.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


def _local_slice(logits: Tensor) -> tuple[Tensor, Any, int]:
    """This rank's ``[..., V / n]`` slice, the group, and the slice's first vocabulary id
    (``Shard`` splits like ``torch.chunk``)."""
    mesh = logits.device_mesh
    local = logits.to_local()
    width = -(-logits.shape[-1] // mesh.size())
    return local, mesh.get_group(), mesh.get_local_rank() * width


def _split_logz(local: Tensor, group: Any) -> Tensor:
    import torch.distributed as dist

    peak = local.detach().amax(-1)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX, group=group)
    sums = _SumOverRanks.apply((local - peak.unsqueeze(-1)).exp().sum(-1), group)
    return peak + sums.log()


def _split_selected_logprobs(logits: Tensor, targets: Tensor) -> Tensor:
    local, group, start = _local_slice(logits)
    index = targets - start
    here = (index >= 0) & (index < local.shape[-1])
    picked = local.gather(-1, index.clamp(0, local.shape[-1] - 1).unsqueeze(-1)).squeeze(-1)
    target = _SumOverRanks.apply(picked * here.to(picked.dtype), group)
    return target - _split_logz(local, group)


def _split_entropy(logits: Tensor) -> Tensor:
    import torch.distributed as dist

    local, group, _ = _local_slice(logits)
    local = local.float()
    logp = local - _split_logz(local, group).unsqueeze(-1)
    part = -(logp.exp() * logp).sum(-1)
    dist.all_reduce(part, group=group)
    return part


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` where ``mask`` is 1 (0 when the mask is empty)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1)
