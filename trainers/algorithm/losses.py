"""Policy losses, registered by name; every one returns the same :class:`LossTerms`.

Choose one with ``algorithm.loss``. Every loss has the signature::

    loss(logp, old_logp, advantages, mask, *, total_tokens, total_sequences,
         eps_low, eps_high, clip_c, kl_coef, ref_logp, weights, beta) -> LossTerms

and ignores the keywords it does not use, so the learner and the distributed strategies
call any of them the same way. ``logp`` is ``[B, T]`` with grad; ``old_logp`` the
sampling policy's (no grad); ``advantages`` ``[B]`` (broadcast over a sample's tokens) or
``[B, T]``; ``mask`` is 1 on trained tokens; ``weights`` ``[B, T]`` optional per-token
importance weights (truncated importance sampling against the rollout engine; no grad).

Aggregation, invariant under micro-batching and data parallelism because the normaliser
is always a count over the *whole* (mini-)batch, never over one micro-batch:

* ``token-mean``: ``sum_{b,t} mask * x / total_tokens`` (DAPO's token-level loss).
* ``seq-mean-token-mean``: ``sum_b (sum_t mask * x / n_b) / total_sequences``, ``n_b``
  the trained tokens of sequence ``b`` (a sequence with none counts in neither sum).

| name | per-token term (``r = exp(logp - old_logp)``) | aggregation | source |
|---|---|---|---|
| ``dapo`` | ``max(-A r, -A clip(r, 1-eps_low, 1+eps_high))`` | token-mean | DAPO, arXiv 2503.14476 |
| ``grpo`` | ``max(-A r, -A clip(r, 1-eps_low, 1+eps_high))`` (the ``grpo`` preset: ``eps_high = eps_low``) | seq-mean-token-mean | GRPO (DeepSeekMath), arXiv 2402.03300 |
| ``ppo`` | as ``dapo``, and for ``A < 0`` at most ``-A c`` (dual-clip, ``c = clip_c = 3``) | token-mean | PPO; dual-clip, arXiv 1912.09729 |
| ``gspo`` | as ``dapo`` with ``r`` replaced by the sequence ratio ``exp(mean_t log r)`` (its gradient per token) | seq-mean-token-mean | GSPO, arXiv 2507.18071 |
| ``cispo`` | ``-A sg(clip(r, 1-eps_low, 1+eps_high)) logp`` | token-mean | CISPO (MiniMax-M1), arXiv 2506.13585 |
| ``reinforce`` | ``-A logp`` | token-mean | REINFORCE |
| ``apo`` | per sequence ``(beta sum_t (logp - ref) - A)^2``, ``A = r - V*`` | seq-mean | A*PO, arXiv 2505.20686 |

An optional KL penalty to the reference (k3 estimator, ``kl_coef > 0``) is added to any
loss except ``apo`` (whose regression already holds the policy to the reference), with
the loss's own aggregation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from agentgym import ConfigError, UnknownNameError
from agentgym.trainers.algorithm.catalog import (
    LOSSES,
    SEQ_MEAN_TOKEN_MEAN,
    TOKEN_MEAN,
)


@dataclass(frozen=True)
class LossTerms:
    """The loss of one micro-batch and what it is made of (all scalars).

    ``loss`` is the micro-batch's *contribution* to the (mini-)batch loss: summing it
    over micro-batches (and ranks) gives the batch loss, so ``loss.backward()`` per
    micro-batch accumulates the right gradient. ``policy_loss`` and ``kl_loss`` are
    contributions too. The counts are token sums over this micro-batch.

    Attributes:
        clipped_low_tokens / clipped_high_tokens: tokens whose ratio was clipped below
            ``1 - eps_low`` / above ``1 + eps_high`` (where the clip bound the loss).
        dual_clipped_tokens: tokens bounded by ``ppo``'s dual clip.
        ratio_sum: sum of the importance ratios (sequence ratios for ``gspo``).
        kl_sum: sum of the per-token k3 KL to the reference (0 without a reference).
        tokens: trained tokens.
    """

    loss: Tensor
    policy_loss: Tensor
    kl_loss: Tensor
    clipped_low_tokens: Tensor
    clipped_high_tokens: Tensor
    ratio_sum: Tensor
    kl_sum: Tensor
    tokens: Tensor
    dual_clipped_tokens: Tensor | None = None


PolicyLoss = Callable[..., LossTerms]


@dataclass(frozen=True)
class LossSpec:
    """A registered loss: the function and how it aggregates (see the module docstring)."""

    fn: PolicyLoss
    aggregation: str
    needs_reference: bool = False


#: name -> :class:`LossSpec`, filled by :func:`policy_loss`
POLICY_LOSSES: dict[str, LossSpec] = {}


def policy_loss(name: str) -> Callable[[PolicyLoss], PolicyLoss]:
    """Register ``fn`` as the loss ``name`` of :data:`.catalog.LOSSES` (a decorator): its
    aggregation and whether it needs the reference come from there."""

    def register(fn: PolicyLoss) -> PolicyLoss:
        if name in POLICY_LOSSES:
            raise ConfigError(f"policy loss {name!r} is registered twice.")
        if name not in LOSSES:
            raise ConfigError(f"policy loss {name!r}: add it to catalog.LOSSES first.")
        needs = LOSSES[name]
        POLICY_LOSSES[name] = LossSpec(fn, needs.aggregation, needs.needs_reference)
        return fn

    return register


def loss_spec(name: str) -> LossSpec:
    """The registered loss ``name``, or an error that suggests the closest names."""
    if name not in POLICY_LOSSES:
        raise UnknownNameError("policy loss", name, POLICY_LOSSES)
    return POLICY_LOSSES[name]


# ----------------------------------------------------------------------------- pieces


def _check(total_tokens: float, kl_coef: float, ref_logp: Tensor | None) -> None:
    if total_tokens <= 0:
        raise ConfigError(f"total_tokens must be > 0, got {total_tokens}.")
    if kl_coef > 0 and ref_logp is None:
        raise ConfigError("kl_coef > 0 needs ref_logp (the reference policy's log-probs).")


def _per_token(adv: Tensor, like: Tensor) -> Tensor:
    return (adv if adv.dim() == 2 else adv[:, None]).to(like.dtype)


def aggregate(
    x: Tensor, mask: Tensor, mode: str, *, total_tokens: float, total_sequences: float | None
) -> Tensor:
    """``x`` ``[B, T]`` reduced to this micro-batch's contribution under ``mode``."""
    if mode == TOKEN_MEAN:
        return (x * mask).sum() / total_tokens
    if mode == SEQ_MEAN_TOKEN_MEAN:
        if not total_sequences:
            raise ConfigError(f"{mode} aggregation needs total_sequences > 0.")
        n = mask.sum(-1)
        per_seq = (x * mask).sum(-1) / n.clamp(min=1)
        return torch.where(n > 0, per_seq, torch.zeros_like(per_seq)).sum() / total_sequences
    raise ConfigError(f"unknown aggregation {mode!r}.")


def _kl(logp: Tensor, ref_logp: Tensor | None) -> Tensor:
    """k3 estimate of KL(pi || ref) per token: ``exp(ref - logp) - (ref - logp) - 1 >= 0``."""
    if ref_logp is None:
        return torch.zeros_like(logp)
    delta = ref_logp.detach() - logp
    return torch.exp(delta) - delta - 1.0


def _terms(
    pg: Tensor,
    logp: Tensor,
    mask: Tensor,
    mode: str,
    *,
    total_tokens: float,
    total_sequences: float | None,
    ref_logp: Tensor | None,
    kl_coef: float,
    ratio: Tensor,
    clipped_low: Tensor,
    clipped_high: Tensor,
    dual: Tensor | None = None,
) -> LossTerms:
    """Assemble :class:`LossTerms` from a per-token policy term ``pg``."""
    agg = {"total_tokens": total_tokens, "total_sequences": total_sequences}
    policy = aggregate(pg, mask, mode, **agg)
    kl = _kl(logp, ref_logp)
    kl_loss = aggregate(kl, mask, mode, **agg)
    loss = policy + kl_coef * kl_loss if kl_coef > 0 else policy
    on = mask > 0
    with torch.no_grad():
        return LossTerms(
            loss=loss,
            policy_loss=policy.detach(),
            kl_loss=kl_loss.detach(),
            clipped_low_tokens=(clipped_low & on).sum().to(torch.float64),
            clipped_high_tokens=(clipped_high & on).sum().to(torch.float64),
            ratio_sum=(ratio * mask).sum().to(torch.float64),
            kl_sum=(kl * mask).sum().to(torch.float64),
            tokens=mask.sum().to(torch.float64),
            dual_clipped_tokens=None if dual is None else (dual & on).sum().to(torch.float64),
        )


def _clipped_surrogate(
    ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float
) -> tuple[Tensor, Tensor, Tensor]:
    """``max(-A r, -A clip(r))`` and where the low / high clip bound it."""
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    pg = torch.maximum(unclipped, clipped)
    bound = clipped > unclipped
    return pg, bound & (ratio < 1.0 - eps_low), bound & (ratio > 1.0 + eps_high)


# ----------------------------------------------------------------------------- losses


@policy_loss("dapo")
def dapo_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    total_tokens: float,
    total_sequences: float | None = None,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    weights: Tensor | None = None,
    **_: object,
) -> LossTerms:
    """DAPO's token-level clip-higher surrogate (eq. 8 of the paper); token-mean.

    Per token: ``max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))`` with
    ``r = exp(logp - old_logp)``, times ``weights`` when given; summed over the trained
    tokens and divided by ``total_tokens``, the policy tokens of the *whole* batch, so
    every token weighs the same and long responses are not down-weighted.
    """
    _check(total_tokens, kl_coef, ref_logp)
    mask = mask.to(logp.dtype)
    ratio = torch.exp(logp - old_logp.detach())
    pg, low, high = _clipped_surrogate(ratio, _per_token(advantages, logp), eps_low, eps_high)
    if weights is not None:
        pg = pg * weights.detach().to(pg.dtype)
    return _terms(
        pg,
        logp,
        mask,
        TOKEN_MEAN,
        total_tokens=total_tokens,
        total_sequences=total_sequences,
        ref_logp=ref_logp,
        kl_coef=kl_coef,
        ratio=ratio,
        clipped_low=low,
        clipped_high=high,
    )


@policy_loss("grpo")
def grpo_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    total_tokens: float,
    total_sequences: float | None = None,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    weights: Tensor | None = None,
    **_: object,
) -> LossTerms:
    """GRPO's clipped surrogate as DeepSeekMath published it (eq. 3 of arXiv 2402.03300).

    Per token the same term as :func:`dapo_policy_loss` (its clip is symmetric when
    ``eps_high = eps_low``, as the ``grpo`` preset sets); the difference is the
    aggregation: each sequence's tokens are averaged first (``1/|o_i|``) and the
    sequences then weigh the same (``1/G``, here ``1 / total_sequences`` of the whole
    batch), so a token of a short reply weighs more than one of a long reply. A sequence
    is one policy turn (:mod:`agentgym.trainers.batch`). The paper's KL term (``beta =
    0.04``, the k3 estimator) is ``kl_coef``, with the same aggregation.
    """
    _check(total_tokens, kl_coef, ref_logp)
    mask = mask.to(logp.dtype)
    ratio = torch.exp(logp - old_logp.detach())
    pg, low, high = _clipped_surrogate(ratio, _per_token(advantages, logp), eps_low, eps_high)
    if weights is not None:
        pg = pg * weights.detach().to(pg.dtype)
    return _terms(
        pg,
        logp,
        mask,
        SEQ_MEAN_TOKEN_MEAN,
        total_tokens=total_tokens,
        total_sequences=total_sequences,
        ref_logp=ref_logp,
        kl_coef=kl_coef,
        ratio=ratio,
        clipped_low=low,
        clipped_high=high,
    )


@policy_loss("ppo")
def ppo_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    total_tokens: float,
    total_sequences: float | None = None,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    clip_c: float = 3.0,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    weights: Tensor | None = None,
    **_: object,
) -> LossTerms:
    """PPO's clipped surrogate with dual-clip for negative advantages; token-mean.

    As :func:`dapo_policy_loss`, and for ``A < 0`` the per-token loss is at most
    ``-A * clip_c`` (verl's convention, ``clip_c = 3``): a token whose ratio has run far
    above 1 on a bad sample cannot dominate the batch.
    """
    _check(total_tokens, kl_coef, ref_logp)
    if clip_c <= 1:
        raise ConfigError(f"ppo's dual-clip constant must be > 1, got {clip_c}.")
    mask = mask.to(logp.dtype)
    adv = _per_token(advantages, logp)
    ratio = torch.exp(logp - old_logp.detach())
    pg, low, high = _clipped_surrogate(ratio, adv, eps_low, eps_high)
    cap = -adv * clip_c
    dual = (adv < 0) & (pg > cap)
    pg = torch.where(adv < 0, torch.minimum(pg, cap), pg)
    if weights is not None:
        pg = pg * weights.detach().to(pg.dtype)
    return _terms(
        pg,
        logp,
        mask,
        TOKEN_MEAN,
        total_tokens=total_tokens,
        total_sequences=total_sequences,
        ref_logp=ref_logp,
        kl_coef=kl_coef,
        ratio=ratio,
        clipped_low=low,
        clipped_high=high,
        dual=dual,
    )


@policy_loss("gspo")
def gspo_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    total_tokens: float,
    total_sequences: float | None = None,
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    weights: Tensor | None = None,
    **_: object,
) -> LossTerms:
    """GSPO: the importance ratio of a whole sequence, clipped per sequence.

    ``s_b = exp(mean_t (logp - old_logp))`` over sequence ``b``'s trained tokens; each
    token uses ``s_b * pi_t / sg(pi_t)`` (its value is ``s_b``, its gradient that of its
    own log-prob, GSPO-token's form), clipped to ``[1 - eps_low, 1 + eps_high]``. The
    paper's clip range is about 1e-3 of DAPO's: set ``algorithm.eps_low`` /
    ``eps_high`` accordingly. Aggregation: seq-mean-token-mean (``total_sequences`` of
    the whole batch).
    """
    _check(total_tokens, kl_coef, ref_logp)
    mask = mask.to(logp.dtype)
    log_ratio = (logp - old_logp.detach()) * mask
    seq_log_ratio = log_ratio.sum(-1) / mask.sum(-1).clamp(min=1)
    log_s = (logp - logp.detach() + seq_log_ratio.detach()[:, None]).clamp(max=10.0)
    ratio = torch.exp(log_s)
    pg, low, high = _clipped_surrogate(ratio, _per_token(advantages, logp), eps_low, eps_high)
    if weights is not None:
        pg = pg * weights.detach().to(pg.dtype)
    return _terms(
        pg,
        logp,
        mask,
        SEQ_MEAN_TOKEN_MEAN,
        total_tokens=total_tokens,
        total_sequences=total_sequences,
        ref_logp=ref_logp,
        kl_coef=kl_coef,
        ratio=ratio.detach(),
        clipped_low=low,
        clipped_high=high,
    )


@policy_loss("cispo")
def cispo_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    total_tokens: float,
    total_sequences: float | None = None,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    weights: Tensor | None = None,
    **_: object,
) -> LossTerms:
    """CISPO: REINFORCE weighted by a clipped, stop-gradient importance ratio; token-mean.

    Per token: ``-A * sg(clip(r, 1 - eps_low, 1 + eps_high)) * logp``. Unlike PPO's clip
    no token's gradient is dropped: the clip bounds its weight. (MiniMax-M1 clips only
    from above; a large ``eps_low`` does that.)
    """
    _check(total_tokens, kl_coef, ref_logp)
    mask = mask.to(logp.dtype)
    ratio = torch.exp(logp.detach() - old_logp.detach())
    weight = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    pg = -_per_token(advantages, logp) * weight * logp
    if weights is not None:
        pg = pg * weights.detach().to(pg.dtype)
    return _terms(
        pg,
        logp,
        mask,
        TOKEN_MEAN,
        total_tokens=total_tokens,
        total_sequences=total_sequences,
        ref_logp=ref_logp,
        kl_coef=kl_coef,
        ratio=ratio,
        clipped_low=ratio < 1.0 - eps_low,
        clipped_high=ratio > 1.0 + eps_high,
    )


@policy_loss("reinforce")
def reinforce_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    total_tokens: float,
    total_sequences: float | None = None,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    weights: Tensor | None = None,
    **_: object,
) -> LossTerms:
    """Plain REINFORCE, ``-A * logp`` per token; token-mean. No ratio, no clip: a
    baseline to compare the others with (strictly on-policy)."""
    _check(total_tokens, kl_coef, ref_logp)
    mask = mask.to(logp.dtype)
    pg = -_per_token(advantages, logp) * logp
    if weights is not None:
        pg = pg * weights.detach().to(pg.dtype)
    none = torch.zeros_like(mask, dtype=torch.bool)
    return _terms(
        pg,
        logp,
        mask,
        TOKEN_MEAN,
        total_tokens=total_tokens,
        total_sequences=total_sequences,
        ref_logp=ref_logp,
        kl_coef=kl_coef,
        ratio=torch.ones_like(logp).detach(),
        clipped_low=none,
        clipped_high=none,
    )


@policy_loss("apo")
def apo_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    total_tokens: float,
    total_sequences: float | None = None,
    ref_logp: Tensor | None = None,
    beta: float = 1e-3,
    weights: Tensor | None = None,
    **_: object,
) -> LossTerms:
    """A*PO's least-squares regression, one term per sequence; mean over sequences.

    ``(beta * sum_t (logp - ref_logp) - A)^2`` with ``A = r - V*(x)`` (the ``apo``
    estimator) and the sequence's log-ratio to the reference policy summed over its
    trained tokens. ``weights`` (truncated importance sampling) scale each sequence's
    term by their mean over its tokens.
    """
    if total_tokens <= 0:
        raise ConfigError(f"total_tokens must be > 0, got {total_tokens}.")
    if ref_logp is None:
        raise ConfigError("the apo loss needs ref_logp (the reference policy's log-probs).")
    if not total_sequences:
        raise ConfigError("the apo loss needs total_sequences > 0.")
    mask = mask.to(logp.dtype)
    adv = advantages if advantages.dim() == 1 else advantages[:, 0]
    log_ratio = ((logp - ref_logp.detach()) * mask).sum(-1)
    err = beta * log_ratio - adv.to(logp.dtype)
    per_seq = err.pow(2)
    has = mask.sum(-1) > 0
    if weights is not None:
        w = (weights.detach().to(logp.dtype) * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        per_seq = per_seq * w
    policy = torch.where(has, per_seq, torch.zeros_like(per_seq)).sum() / total_sequences
    kl = _kl(logp, ref_logp)
    none = torch.zeros_like(mask, dtype=torch.bool)
    with torch.no_grad():
        return LossTerms(
            loss=policy,
            policy_loss=policy.detach(),
            kl_loss=torch.zeros((), dtype=logp.dtype),
            clipped_low_tokens=(none).sum().to(torch.float64),
            clipped_high_tokens=(none).sum().to(torch.float64),
            ratio_sum=mask.sum().to(torch.float64),
            kl_sum=(kl * mask).sum().to(torch.float64),
            tokens=mask.sum().to(torch.float64),
        )
