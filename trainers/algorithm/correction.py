"""Rollout/learner mismatch: measured every step, and optionally corrected.

The engine that sampled a token and the learner that trains on it compute its
log-probability with different kernels, precision and (in MoE layers) possibly different
expert routing; the importance ratio PPO-style losses use assumes they agree. Two pure
functions on ``[B, T]`` tensors:

* :func:`mismatch_stats`: the absolute log-prob difference (sum and max) and the k3
  estimate of KL(engine || learner) over the tokens both know, as sums a learner can add
  up over micro-batches and ranks;
* :func:`importance_weights`: truncated importance sampling (TIS) weights that correct
  the loss for the mismatch, ``min(exp(learner_old - engine), C)`` per token, or per
  sequence from the summed log-ratio, or a mask that drops tokens whose ratio leaves a
  band.
"""

from __future__ import annotations

import torch
from torch import Tensor

from agentgym import UnknownNameError
from agentgym.trainers.algorithm.catalog import TIS_MODES


def mismatch_stats(learner_logp: Tensor, engine_logp: Tensor, known: Tensor) -> dict[str, Tensor]:
    """Sums over the tokens in ``known`` (bool ``[B, T]``) of the learner/engine gap.

    Returns ``abs_sum`` and ``abs_max`` of ``|learner - engine|``, ``k3_sum`` of
    ``exp(d) - d - 1`` with ``d = learner - engine`` (an estimate of KL(engine ||
    learner) from the engine's own samples, >= 0), and ``tokens``.
    """
    d = (learner_logp.detach() - engine_logp).to(torch.float64)
    d = torch.where(known, d, torch.zeros_like(d))
    k3 = torch.exp(d) - d - 1.0
    return {
        "abs_sum": d.abs().sum(),
        "abs_max": d.abs().max() if d.numel() else torch.zeros((), dtype=torch.float64),
        "k3_sum": k3.sum(),
        "tokens": known.sum().to(torch.float64),
    }


def importance_weights(
    learner_logp: Tensor,
    engine_logp: Tensor,
    known: Tensor,
    *,
    mode: str,
    cap: float = 2.0,
    band: tuple[float, float] = (0.5, 2.0),
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-token loss weights that correct for the engine having sampled the tokens.

    Args:
        learner_logp: the learner's log-probs of the sampled tokens under the policy that
            sampled them (the old policy), ``[B, T]``.
        engine_logp: the engine's log-probs of the same tokens.
        known: bool ``[B, T]``: tokens with an engine log-prob and a loss (others get 1).
        mode: ``token``: ``min(exp(learner - engine), cap)`` per token; ``sequence``:
            ``min(exp(sum_t (learner - engine)), cap)`` for every token of the sequence;
            ``mask``: 1 where the token's ratio lies in ``band``, else 0; ``off``: 1.
        cap: the truncation ``C``.
        band: ``(low, high)`` ratios kept by ``mask``.

    Returns:
        ``(weights, truncated_tokens, masked_tokens)``: weights ``[B, T]`` without grad,
        and how many known tokens had their weight cut to ``cap`` or were masked.
    """
    if mode not in TIS_MODES:
        raise UnknownNameError("importance-sampling mode", mode, TIS_MODES)
    ones = torch.ones_like(learner_logp, dtype=torch.float32)
    zero = torch.zeros((), dtype=torch.float64)
    if mode == "off":
        return ones, zero, zero
    d = torch.where(known, (learner_logp.detach() - engine_logp).to(torch.float32), 0.0)
    if mode == "token":
        raw = torch.exp(d)
        w = torch.clamp(raw, max=cap)
        truncated = ((raw > cap) & known).sum().to(torch.float64)
        return torch.where(known, w, ones), truncated, zero
    if mode == "sequence":
        raw = torch.exp(d.sum(-1, keepdim=True)).expand_as(d)
        w = torch.clamp(raw, max=cap)
        truncated = ((raw > cap) & known).sum().to(torch.float64)
        return torch.where(known, w, ones), truncated, zero
    ratio = torch.exp(d)
    keep = (ratio >= band[0]) & (ratio <= band[1])
    masked = (known & ~keep).sum().to(torch.float64)
    return torch.where(known & ~keep, torch.zeros_like(ones), ones), zero, masked
