"""One update on a batch of samples, through the learner's interface: the policy's
(:func:`update_policy`: DAPO and every registered loss; T-PPO's segments), the policy's
with the critic's in each optimizer step (:func:`update_actor_critic`: PPO, VAPO) and the
critic's alone (:func:`update_critic`: value pretraining, T-PPO's critic on the episodes
that ended).

All are the same few calls of :class:`~agentgym.trainers.learner.Learner`, with
different loss functions::

    forward(mbs, logprobs)                          old log-probs, if needed
    with reference(): forward(mbs, logprobs)        the reference's, if needed
    forward(mbs, values, output="values")           the critic values the batch (GAE)
    for each mini-batch:
        forward_backward(mbs, ValueLoss, "values")  the critic (its extra updates first,
        critic_step()                               each a critic-only step)
        forward_backward(mbs, PolicyLoss)           the policy
        step()                                      clip each group, step, zero

The batch is split into ``algorithm.updates_per_batch`` mini-batches (one optimizer step
each) and each mini-batch into micro-batches (gradient accumulation); each token's (or
sequence's) loss divides by the count of its whole mini-batch, whatever the loss.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentgym.trainers.algorithm import (
    importance_weights,
    logprobs_and_entropy,
    loss_spec,
    mismatch_stats,
    positive_nll,
    selected_logprobs,
    value_loss,
)
from agentgym.trainers.batch import MicroBatch, Sample
from agentgym.trainers.config import AlgorithmConfig
from agentgym.trainers.critic import CriticConfig, attach_advantages
from agentgym.trainers.learner import Learner, combine_metrics
from agentgym.trainers.turn_kinds import logprob_gain


@dataclass(frozen=True)
class PolicyLoss:
    """The policy loss of one micro-batch (``algorithm.loss``, TIS, VAPO's positive
    NLL), given the logits: a learner loss function. Its metrics are sums."""

    algo: AlgorithmConfig
    temperature: float
    total_tokens: int  # the mini-batch's trained tokens, over all ranks
    total_sequences: int  # its samples with a trained token
    positive_tokens: int  # its trained tokens of correct samples (the NLL divides by it)

    def __call__(self, mb: MicroBatch, logits: torch.Tensor) -> tuple[torch.Tensor, dict]:
        algo = self.algo
        logp, ent = logprobs_and_entropy(logits, mb.targets, self.temperature)
        # the learner's log-probs under the policy that sampled (old = current when the
        # batch gets one update), compared with the engine's for the same tokens
        sampled_by = mb.old_logprobs if mb.old_logprobs is not None else logp.detach()
        known = mb.has_sampler_logprobs & (mb.loss_mask > 0)
        weights, truncated, masked = importance_weights(
            sampled_by,
            mb.sampler_logprobs,
            known,
            mode=algo.tis,
            cap=algo.tis_cap,
            band=(algo.tis_band[0], algo.tis_band[1]),
        )
        advantages = mb.token_advantages if mb.token_advantages is not None else mb.advantages
        terms = loss_spec(algo.loss).fn(
            logp,
            sampled_by,
            advantages,
            mb.loss_mask,
            total_tokens=self.total_tokens,
            total_sequences=self.total_sequences,
            eps_low=algo.eps_low,
            eps_high=algo.eps_high,
            clip_c=algo.clip_c,
            ref_logp=mb.ref_logprobs,
            kl_coef=algo.kl_coef,
            beta=algo.apo_beta,
            weights=weights if algo.tis != "off" else None,
        )
        loss, stats = terms.loss, {}
        if algo.nll_coef > 0 and self.positive_tokens > 0:  # VAPO's positive-example NLL
            nll = positive_nll(logp, mb.loss_mask, mb.positive, total_tokens=self.positive_tokens)
            loss = loss + algo.nll_coef * nll
            stats["nll"] = float(nll.detach())
        with torch.no_grad():
            gap = mismatch_stats(sampled_by, mb.sampler_logprobs, known)
        stats.update(
            loss=float(terms.loss.detach()),
            policy_loss=float(terms.policy_loss),
            kl_loss=float(terms.kl_loss),
            clip_low=float(terms.clipped_low_tokens),
            clip_high=float(terms.clipped_high_tokens),
            ratio=float(terms.ratio_sum),
            kl=float(terms.kl_sum),
            tokens=float(terms.tokens),
            entropy=float((ent * mb.loss_mask).sum()),
            mismatch=float(gap["abs_sum"]),
            mismatch_k3=float(gap["k3_sum"]),
            mismatch_tokens=float(gap["tokens"]),
            mismatch_max=float(gap["abs_max"]),
            dual_clip=0.0
            if terms.dual_clipped_tokens is None
            else float(terms.dual_clipped_tokens),
            tis_truncated=float(truncated),
            tis_masked=float(masked),
        )
        return loss, stats


@dataclass(frozen=True)
class ValueLoss:
    """The critic's clipped value loss of one micro-batch, given its values: a learner
    loss function. ``weight`` scales the metric (the mean over the critic's updates)."""

    cfg: CriticConfig
    total_tokens: int
    weight: float = 1.0

    def __call__(self, mb: MicroBatch, values: torch.Tensor) -> tuple[torch.Tensor, dict]:
        assert mb.old_values is not None and mb.value_targets is not None
        loss = self.cfg.value_coef * value_loss(
            values,
            mb.old_values.to(values.device),
            mb.value_targets.to(values.device),
            mb.loss_mask,
            total_tokens=self.total_tokens,
            clip=self.cfg.value_clip,
        )
        return loss, {"value_loss": self.weight * float(loss.detach())}


def update_policy(
    learner: Learner, samples: Sequence[Sample], algo: AlgorithmConfig, *, temperature: float
) -> dict[str, float]:
    """The policy's update(s) on one batch (DAPO and every registered loss; T-PPO's
    segments); returns ``losses/`` and ``charts/`` metrics.

    With a critic, the batch is valued first and the advantages are GAE's, per token
    (:func:`~agentgym.trainers.critic.attach_advantages`); the critic itself is not
    trained here (T-PPO trains it on another batch, :func:`update_critic`; PPO and VAPO
    train it in the same steps: :func:`update_actor_critic`). Before this split, this
    function trained a learner's critic by default (``train_critic=True``).
    """
    return _update(learner, samples, algo, temperature, None)


def update_actor_critic(
    learner: Learner, samples: Sequence[Sample], algo: AlgorithmConfig, *, temperature: float
) -> dict[str, float]:
    """PPO's and VAPO's update: :func:`update_policy`, with each optimizer step training
    the critic too (``critic.updates_per_batch`` steps per mini-batch, the extra ones
    first and moving the critic alone). Without a critic, :func:`update_policy`."""
    return _update(learner, samples, algo, temperature, learner.critic_config)


def _update(
    learner: Learner,
    samples: Sequence[Sample],
    algo: AlgorithmConfig,
    temperature: float,
    critic: CriticConfig | None,
) -> dict[str, float]:
    """The update on one batch, training ``critic`` in each optimizer step (None: the
    policy alone)."""
    minis, full, critic_stats = _prepare(learner, samples, algo)
    # old log-probs: with one update per batch the policy has not moved since sampling,
    # so old = current (detached) and needs no extra pass
    if len(full) > 1:
        full = [_with_logprobs(learner, mbs, temperature, "old_logprobs") for mbs in full]
    before = _logprobs(learner, full, temperature) if algo.kind_stats else None
    if algo.kl_coef > 0 or loss_spec(algo.loss).needs_reference:
        full = [_with_logprobs(learner, mbs, temperature, "ref_logprobs") for mbs in full]
    sums: list[dict[str, float]] = []
    steps: list[dict[str, float]] = []
    critic_norms: list[float] = []
    for mbs in full:
        tokens = sum(mb.num_tokens for mb in mbs)
        if tokens == 0:
            continue
        if critic is not None:
            sums.append(_critic_passes(learner, mbs, tokens, critic, critic_norms))
        loss = PolicyLoss(
            algo,
            temperature,
            total_tokens=tokens,
            total_sequences=sum(mb.num_trained_samples for mb in mbs),
            positive_tokens=sum(int((mb.loss_mask * mb.positive[:, None]).sum()) for mb in mbs),
        )
        sums.append(learner.forward_backward(mbs, loss))
        steps.append(learner.step())
        if critic is not None:
            critic_norms.append(steps[-1].get("critic_grad_norm", float("nan")))
    total = combine_metrics(sums)
    value = {"losses/value": total.get("value_loss", 0.0) / max(len(steps), 1)}
    kinds = {}
    if before is not None and steps:
        after = _logprobs(learner, full, temperature)
        kinds = _kind_gain(samples, minis, full, before, after)
    return {
        **_policy_metrics(total, steps, algo),
        **kinds,
        **(value if critic is not None else {}),
        **_mean("losses/critic_grad_norm", critic_norms),
        **critic_stats,
        **_replay_metrics(learner),
    }


def update_critic(
    learner: Learner, samples: Sequence[Sample], algo: AlgorithmConfig, *, updates: int | None
) -> dict[str, float]:
    """The critic alone on one batch (value pretraining; T-PPO's ended episodes):
    ``updates`` (default ``critic.updates_per_batch``) critic-only optimizer steps per
    mini-batch against the batch's GAE value targets. The policy does not move and its
    learning-rate warm-up does not advance. Returns ``critic/`` and ``losses/`` metrics."""
    cfg = learner.critic_config
    assert cfg is not None, "update_critic needs a learner with a critic"
    _, full, critic_stats = _prepare(learner, samples, algo)
    cfg = dataclasses.replace(cfg, updates_per_batch=updates or cfg.updates_per_batch)
    sums: list[dict[str, float]] = []
    norms: list[float] = []
    for mbs in full:
        tokens = sum(mb.num_tokens for mb in mbs)
        if tokens == 0:
            continue
        sums.append(_critic_passes(learner, mbs, tokens, cfg, norms))
        norms.append(learner.critic_step().get("critic_grad_norm", float("nan")))
    return {
        "losses/value": combine_metrics(sums).get("value_loss", 0.0) / max(len(sums), 1),
        **_mean("losses/critic_grad_norm", norms),
        "charts/optimizer_steps": float(len(norms)),
        **critic_stats,
    }


# ---------------------------------------------------------------------- the pieces
def _prepare(
    learner: Learner, samples: Sequence[Sample], algo: AlgorithmConfig
) -> tuple[list[list[int]], list[list[MicroBatch]], dict[str, float]]:
    """The batch cut into mini-batches (sample indices and micro-batches); with a critic
    the micro-batches carry GAE's advantages and value targets, and its statistics."""
    n_mini = min(algo.updates_per_batch, len(samples))
    minis = [list(range(k, len(samples), n_mini)) for k in range(n_mini)]
    full = [learner.microbatches([samples[i] for i in idx]) for idx in minis]
    if learner.critic_config is None:
        return minis, full, {}

    def values(mbs: list[MicroBatch]) -> list[torch.Tensor]:
        return learner.forward(mbs, lambda mb, v: v, output="values")

    full, stats = attach_advantages(values, samples, minis, full, algo)
    return minis, full, stats


def _with_logprobs(
    learner: Learner, mbs: list[MicroBatch], temperature: float, field: str
) -> list[MicroBatch]:
    """``mbs`` carrying the current policy's (``old_logprobs``) or the reference's
    (``ref_logprobs``: the adapter off) log-probs of their targets."""

    def logprobs(mb: MicroBatch, logits: torch.Tensor) -> torch.Tensor:
        return selected_logprobs(logits, mb.targets, temperature)

    reference = learner.reference() if field == "ref_logprobs" else contextlib.nullcontext()
    with reference:
        got = learner.forward(mbs, logprobs)
    return [dataclasses.replace(mb, **{field: lp}) for mb, lp in zip(mbs, got, strict=True)]


def _logprobs(
    learner: Learner, full: list[list[MicroBatch]], temperature: float
) -> list[list[torch.Tensor]]:
    """The current policy's log-probs of every mini-batch's targets (no gradients)."""
    return [
        [mb.old_logprobs for mb in _with_logprobs(learner, mbs, temperature, "old_logprobs")]
        for mbs in full
    ]


def _kind_gain(
    samples: Sequence[Sample],
    minis: list[list[int]],
    full: list[list[MicroBatch]],
    before: list[list[torch.Tensor]],
    after: list[list[torch.Tensor]],
) -> dict[str, float]:
    """``kinds/<kind>_logprob_gain`` of the update, per turn kind
    (:mod:`~agentgym.trainers.turn_kinds`)."""

    def kinds_of(m: int, mb: MicroBatch) -> list[str]:
        return [samples[minis[m][i]].kind for i in mb.indices]

    return logprob_gain(before, after, full, kinds_of)


def _critic_passes(
    learner: Learner,
    mbs: list[MicroBatch],
    tokens: int,
    cfg: CriticConfig,
    norms: list[float],
) -> dict[str, float]:
    """``cfg.updates_per_batch`` backward passes of the critic's value loss on one
    mini-batch, a critic-only step between each two (their norms appended to ``norms``);
    the last pass's gradients are left for the caller's step. Its values are clipped
    against those it gave before the first. Returns the mean value loss's metric."""
    n = cfg.updates_per_batch
    sums = []
    for k in range(n):
        if k:
            norms.append(learner.critic_step().get("critic_grad_norm", float("nan")))
        loss = ValueLoss(cfg, total_tokens=tokens, weight=1.0 / n)
        sums.append(learner.forward_backward(mbs, loss, output="values"))
    return combine_metrics(sums)


def _policy_metrics(
    sums: dict[str, float], steps: list[dict[str, float]], algo: AlgorithmConfig
) -> dict[str, float]:
    """The policy loss's metrics: per-mini-batch losses averaged over the optimizer
    steps, per-token figures over the trained tokens."""
    n = max(sums.get("tokens", 0.0), 1.0)
    per_step = max(len(steps), 1)
    known = max(sums.get("mismatch_tokens", 0.0), 1.0)

    def s(key: str) -> float:
        return sums.get(key, 0.0)

    return {
        "losses/total": s("loss") / per_step,
        "losses/policy": s("policy_loss") / per_step,
        "losses/kl": s("kl_loss") / per_step,
        "losses/entropy": s("entropy") / n,
        "losses/clip_fraction": (s("clip_low") + s("clip_high")) / n,
        "losses/clip_fraction_low": s("clip_low") / n,
        "losses/clip_fraction_high": s("clip_high") / n,
        "losses/ratio_mean": s("ratio") / n,
        "losses/approx_kl_ref": s("kl") / n,
        "losses/grad_norm": sum(st["grad_norm"] for st in steps) / len(steps) if steps else 0.0,
        "losses/dual_clip_fraction": s("dual_clip") / n,
        "charts/logprob_mismatch": s("mismatch") / known,
        "charts/logprob_mismatch_max": s("mismatch_max"),
        "charts/logprob_mismatch_k3": s("mismatch_k3") / known,
        "charts/tis_truncated_share": s("tis_truncated") / known,
        "charts/tis_masked_share": s("tis_masked") / known,
        **({"losses/nll_positive": s("nll") / per_step} if algo.nll_coef > 0 else {}),
        "charts/train_tokens": s("tokens"),
        "charts/lr": steps[-1]["lr"] if steps else 0.0,
        "charts/optimizer_steps": float(len(steps)),
    }


def _mean(key: str, values: list[float]) -> dict[str, float]:
    """``{key: mean}``, or nothing when there are no values."""
    return {key: sum(values) / len(values)} if values else {}


def _replay_metrics(learner: Learner) -> dict[str, float]:
    """Router replay's counts since the last update: positions replayed, and the share
    where the learner's router would have chosen other experts (nothing without router
    replay)."""
    counts = learner.router_counts()
    if counts is None:
        return {}
    replayed, changed = counts
    return {
        "charts/router_replayed": replayed,
        "charts/router_changed_share": changed / max(replayed, 1.0),
    }
