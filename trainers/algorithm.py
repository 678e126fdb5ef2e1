"""DAPO's algorithm pieces as pure functions on tensors.

Nothing here knows about models, environments or the loop: each function takes tensors
(or plain sequences) and returns tensors, so each has a test computed by hand in
``tests/trainers/test_algorithm.py``. Notation follows the DAPO paper (arXiv 2503.14476):

* ``G`` samples per task form a *group*; ``group_ids[i]`` says which group sample ``i``
  belongs to (any integers; equal ids = same group).
* ``logp`` / ``old_logp`` / ``ref_logp`` are per-token log-probabilities of the sampled
  tokens under the current policy, the policy that sampled them, and the reference
  policy; ``mask`` is 1 on tokens the policy produced (the ones we train on), 0 on
  prompt, environment text and padding.

Functions:

* :func:`group_advantages` -- ``grpo`` (group-normalised, DAPO's default), ``rloo``
  (leave-one-out baseline) and ``apo`` (reward minus the best reward of the group).
* :func:`informative_groups` -- dynamic sampling's filter: groups whose rewards are not
  all equal.
* :func:`overlong_penalty` -- DAPO's soft overlong punishment.
* :func:`length_reward` -- Kimi k1.5's group-relative length reward.
* :func:`dapo_policy_loss` -- clip-higher surrogate, token-level sum normalised by the
  token count of the *whole* batch, optional KL to the reference (k3 estimator).
* :func:`token_entropy` / :func:`selected_logprobs` -- per-token helpers on logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from agentgym import ConfigError, UnknownNameError

ADVANTAGE_ESTIMATORS: tuple[str, ...] = ("grpo", "rloo", "apo")


def _group_index(group_ids: Tensor) -> tuple[Tensor, int]:
    """Dense group indices 0..K-1 (in order of first appearance is not needed) and K."""
    _, inverse = torch.unique(group_ids, return_inverse=True)
    return inverse, int(inverse.max().item()) + 1 if inverse.numel() else 0


def _group_sum(values: Tensor, index: Tensor, k: int) -> Tensor:
    return torch.zeros(k, dtype=values.dtype, device=values.device).index_add_(0, index, values)


def group_stats(rewards: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sample group mean, unbiased group std (0 for groups of one) and group size."""
    rewards = rewards.to(torch.float64)
    index, k = _group_index(group_ids)
    ones = torch.ones_like(rewards)
    size = _group_sum(ones, index, k)
    mean = _group_sum(rewards, index, k) / size
    sq = _group_sum((rewards - mean[index]) ** 2, index, k)
    var = torch.where(size > 1, sq / (size - 1).clamp(min=1), torch.zeros_like(sq))
    return mean[index], var.sqrt()[index], size[index]


def group_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    estimator: str = "grpo",
    *,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """One advantage per sample, computed within its group.

    * ``grpo``: ``(r_i - mean_g) / (std_g + eps)``; with ``normalize_std=False`` just
      ``r_i - mean_g`` (Dr. GRPO's choice). ``std_g`` is the unbiased (n-1) std.
    * ``rloo``: ``r_i - mean_{j != i} r_j``, which equals ``G/(G-1) (r_i - mean_g)``.
    * ``apo``: ``r_i - max_g r_j``: the best sample of a task gets 0, the others a
      negative advantage proportional to how far they fall short (A*PO-style, with the
      optimal value estimated by the best of the group).

    A group of one sample has nothing to compare with: its advantage is 0.

    Args:
        rewards: shape ``[N]``.
        group_ids: shape ``[N]``, integer group labels.
        estimator: one of :data:`ADVANTAGE_ESTIMATORS`.
        normalize_std: divide by the group std (``grpo`` only).
        eps: added to the std.

    Returns:
        ``[N]`` float32 advantages.
    """
    if estimator not in ADVANTAGE_ESTIMATORS:
        raise UnknownNameError("advantage estimator", estimator, ADVANTAGE_ESTIMATORS)
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ConfigError(
            f"rewards and group_ids must both be 1-D of the same length; got "
            f"{tuple(rewards.shape)} and {tuple(group_ids.shape)}."
        )
    if rewards.numel() == 0:
        return torch.zeros(0, dtype=torch.float32)
    r = rewards.to(torch.float64)
    mean, std, size = group_stats(r, group_ids)
    if estimator == "grpo":
        adv = r - mean
        if normalize_std:
            adv = adv / (std + eps)
    elif estimator == "rloo":
        adv = (r - mean) * size / (size - 1).clamp(min=1)
    else:  # apo
        index, k = _group_index(group_ids)
        best = torch.full((k,), -torch.inf, dtype=r.dtype).scatter_reduce(
            0, index, r, reduce="amax"
        )
        adv = r - best[index]
    adv = torch.where(size > 1, adv, torch.zeros_like(adv))
    return adv.to(torch.float32)


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
    index, k = _group_index(group_ids)
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
    index, k = _group_index(group_ids)
    hi = torch.full((k,), -torch.inf, dtype=y.dtype).scatter_reduce(0, index, y, reduce="amax")
    lo = torch.full((k,), torch.inf, dtype=y.dtype).scatter_reduce(0, index, y, reduce="amin")
    span = (hi - lo)[index]
    lam = torch.where(span > 0, 0.5 - (y - lo[index]) / span.clamp(min=1e-12), torch.zeros_like(y))
    out = torch.where(correct.bool(), lam, lam.clamp(max=0.0))
    return out.to(torch.float32)


@dataclass(frozen=True)
class LossTerms:
    """The loss of one micro-batch and what it is made of (all scalars).

    ``loss`` is the micro-batch's *contribution* to the batch loss (its token sum divided
    by the batch's total token count): summing ``loss`` over micro-batches gives the
    batch loss, so ``loss.backward()`` per micro-batch accumulates the right gradient.
    The statistics are token sums too (divide by the same count to get means).
    """

    loss: Tensor
    policy_loss: Tensor
    kl_loss: Tensor
    clipped_low_tokens: Tensor
    clipped_high_tokens: Tensor
    ratio_sum: Tensor
    kl_sum: Tensor
    tokens: Tensor


def dapo_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    total_tokens: int | float,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
) -> LossTerms:
    """DAPO's token-level clipped surrogate for one micro-batch (eq. 8 of the paper).

    Per token ``t`` of sample ``i`` (``r = exp(logp - old_logp)``, ``A_i`` the sample's
    advantage)::

        pg_unclipped = -A_i * r
        pg_clipped   = -A_i * clip(r, 1 - eps_low, 1 + eps_high)     # clip-higher
        pg           = max(pg_unclipped, pg_clipped)
        kl           = exp(ref - logp) - (ref - logp) - 1            # k3, >= 0
        loss         = sum_{i,t} mask * (pg + kl_coef * kl) / total_tokens

    ``total_tokens`` is the number of policy tokens in the *whole* batch (every
    micro-batch and accumulation step), not in this micro-batch: every token weighs the
    same, so long responses are not down-weighted (DAPO's token-level loss).

    Args:
        logp: ``[B, T]`` current log-probs (with grad).
        old_logp: ``[B, T]`` log-probs of the sampling policy (no grad).
        advantages: ``[B]`` one per sample (broadcast over its tokens) or ``[B, T]``.
        mask: ``[B, T]`` 1 on trained tokens.
        total_tokens: the normaliser (> 0).
        eps_low / eps_high: clip range ``[1 - eps_low, 1 + eps_high]``.
        ref_logp: ``[B, T]`` reference log-probs, required when ``kl_coef > 0``.
        kl_coef: weight of the KL penalty (0: off, DAPO's default).
    """
    if total_tokens <= 0:
        raise ConfigError(f"total_tokens must be > 0, got {total_tokens}.")
    if kl_coef > 0 and ref_logp is None:
        raise ConfigError("kl_coef > 0 needs ref_logp (the reference policy's log-probs).")
    mask = mask.to(logp.dtype)
    adv = advantages if advantages.dim() == 2 else advantages[:, None]
    adv = adv.to(logp.dtype)

    log_ratio = logp - old_logp.detach()
    ratio = torch.exp(log_ratio)
    pg_unclipped = -adv * ratio
    pg_clipped = -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    pg = torch.maximum(pg_unclipped, pg_clipped)
    policy_loss = (pg * mask).sum() / total_tokens

    if ref_logp is not None:
        delta = ref_logp.detach() - logp
        kl = torch.exp(delta) - delta - 1.0
    else:
        kl = torch.zeros_like(logp)
    kl_loss = (kl * mask).sum() / total_tokens
    loss = policy_loss + kl_coef * kl_loss if kl_coef > 0 else policy_loss

    with torch.no_grad():
        clipped = (pg_clipped > pg_unclipped) & (mask > 0)
        clipped_low = clipped & (ratio < 1.0 - eps_low)
        clipped_high = clipped & (ratio > 1.0 + eps_high)
        return LossTerms(
            loss=loss,
            policy_loss=policy_loss.detach(),
            kl_loss=kl_loss.detach(),
            clipped_low_tokens=clipped_low.sum().to(torch.float64),
            clipped_high_tokens=clipped_high.sum().to(torch.float64),
            ratio_sum=(ratio * mask).sum().to(torch.float64),
            kl_sum=(kl * mask).sum().to(torch.float64),
            tokens=mask.sum().to(torch.float64),
        )


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
