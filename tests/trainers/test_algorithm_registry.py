"""Losses and estimators by name, mismatch correction and A*PO's value: values by hand.

Ratios used throughout: ``r = (1.5, 1.0, 0.5)`` for the three tokens of one sequence
(``logp = log r``, ``old_logp = 0``).
"""

from __future__ import annotations

import math

import pytest
import torch

from agentgym import ConfigError, UnknownNameError
from agentgym.trainers.algorithm import (
    ADVANTAGE_ESTIMATORS,
    POLICY_LOSSES,
    SEQ_MEAN,
    SEQ_MEAN_TOKEN_MEAN,
    TOKEN_MEAN,
    group_advantages,
    importance_weights,
    loss_spec,
    mismatch_stats,
    optimal_value,
)


def t(*xs):
    return torch.tensor(xs, dtype=torch.float32)


def ids(*xs):
    return torch.tensor(xs, dtype=torch.long)


def ratios(*rs):
    return torch.log(torch.tensor([rs])).requires_grad_(True), torch.zeros(1, len(rs))


def test_the_catalog_a_config_is_checked_against_names_each_registered_function():
    """The config's torch-free catalog and the registries agree, name for name and need
    for need; a function cannot register under a name the catalog lacks."""
    from agentgym.trainers.algorithm import ESTIMATORS, LOSSES, advantage_estimator, policy_loss

    assert set(ESTIMATORS) == set(ADVANTAGE_ESTIMATORS) and set(LOSSES) == set(POLICY_LOSSES)
    for name, needs in ESTIMATORS.items():
        spec = ADVANTAGE_ESTIMATORS[name]
        got = (spec.needs_groups, spec.needs_values, spec.needs_critic)
        assert got == (needs.needs_groups, needs.needs_values, needs.needs_critic), name
    for name, needs in LOSSES.items():
        spec = POLICY_LOSSES[name]
        assert (spec.aggregation, spec.needs_reference) == (
            needs.aggregation,
            needs.needs_reference,
        )
    with pytest.raises(ConfigError, match=r"add it to catalog\.ESTIMATORS"):
        advantage_estimator("mine")(lambda *a, **k: None)
    with pytest.raises(ConfigError, match=r"add it to catalog\.LOSSES"):
        policy_loss("mine")(lambda *a, **k: None)
    assert "mine" not in ADVANTAGE_ESTIMATORS and "mine" not in POLICY_LOSSES


def test_every_loss_and_estimator_is_registered_with_its_aggregation():
    assert set(POLICY_LOSSES) == {"dapo", "grpo", "ppo", "gspo", "cispo", "reinforce", "apo"}
    assert set(ADVANTAGE_ESTIMATORS) == {
        "grpo",
        "drgrpo",
        "rloo",
        "reinforce++",
        "apo",
        "apo_group",
        "gae",  # per token, from the critic (PPO / VAPO / T-PPO)
    }
    assert ADVANTAGE_ESTIMATORS["gae"].needs_critic
    assert not any(s.needs_critic for n, s in ADVANTAGE_ESTIMATORS.items() if n != "gae")
    agg = {n: s.aggregation for n, s in POLICY_LOSSES.items()}
    assert agg["gspo"] == agg["grpo"] == SEQ_MEAN_TOKEN_MEAN and agg["apo"] == SEQ_MEAN
    assert agg["dapo"] == agg["ppo"] == agg["cispo"] == agg["reinforce"] == TOKEN_MEAN
    with pytest.raises(UnknownNameError, match="gspo"):
        loss_spec("gpso")
    for spec in POLICY_LOSSES.values():  # every loss has the same signature and record
        logp, old = ratios(1.5, 1.0, 0.5)
        terms = spec.fn(
            logp,
            old,
            t(1.0),
            torch.ones(1, 3),
            total_tokens=3,
            total_sequences=1,
            ref_logp=torch.zeros(1, 3),
            eps_low=0.2,
            eps_high=0.28,
            clip_c=3.0,
            kl_coef=0.0,
            beta=0.5,
            weights=None,
        )
        assert terms.tokens.item() == 3 and terms.loss.requires_grad


class TestPPODualClip:
    def test_negative_advantage_is_capped_at_c(self):
        # A = -1, r = (5, 1, 0.5): clipped surrogate max(5, 1.28) = 5 > c = 3 -> 3
        logp, old = ratios(5.0, 1.0, 0.5)
        terms = POLICY_LOSSES["ppo"].fn(logp, old, t(-1.0), torch.ones(1, 3), total_tokens=3)
        assert terms.loss.item() == pytest.approx((3.0 + 1.0 + 0.8) / 3, abs=1e-6)
        assert terms.dual_clipped_tokens.item() == 1
        terms.loss.backward()
        # the dual-clipped and low-clipped tokens pass no gradient; the middle one: -A r / 3
        assert logp.grad.tolist()[0] == pytest.approx([0.0, 1 / 3, 0.0], abs=1e-6)

    def test_positive_advantages_are_plain_dapo(self):
        logp, old = ratios(5.0, 1.0, 0.5)
        ppo = POLICY_LOSSES["ppo"].fn(logp, old, t(1.0), torch.ones(1, 3), total_tokens=3)
        dapo = POLICY_LOSSES["dapo"].fn(logp, old, t(1.0), torch.ones(1, 3), total_tokens=3)
        assert ppo.loss.item() == pytest.approx(dapo.loss.item())
        assert ppo.dual_clipped_tokens.item() == 0
        with pytest.raises(ConfigError, match="> 1"):
            POLICY_LOSSES["ppo"].fn(logp, old, t(1.0), torch.ones(1, 3), total_tokens=3, clip_c=1)


class TestGRPO:
    def test_symmetric_clip_and_each_sequence_weighs_the_same(self):
        # sequence 0: r = (1.5, 1.0, 0.5), A = 1; sequence 1: one trained token, r = 1.1,
        # A = -2. Symmetric clip [0.8, 1.2]: seq 0 per token max(-1.5, -1.2) = -1.2
        # (clipped high), -1.0, max(-0.5, -0.8) = -0.5, token mean -0.9; seq 1:
        # max(2.2, 2.2) = 2.2. Mean over the 2 sequences: (-0.9 + 2.2) / 2 = 0.65.
        logp = torch.log(torch.tensor([[1.5, 1.0, 0.5], [1.1, 1.0, 1.0]])).requires_grad_(True)
        mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
        kw = {"total_tokens": 4, "total_sequences": 2, "eps_low": 0.2, "eps_high": 0.2}
        terms = POLICY_LOSSES["grpo"].fn(logp, torch.zeros(2, 3), t(1.0, -2.0), mask, **kw)
        assert terms.loss.item() == pytest.approx(0.65, abs=1e-6)
        assert terms.clipped_high_tokens.item() == 1 and terms.clipped_low_tokens.item() == 0
        terms.loss.backward()
        # -A r / (n_b * 2) where unclipped: seq 0 (n = 3) 0, -1/6, -0.5/6; seq 1 (n = 1) 2.2/2
        assert logp.grad[0].tolist() == pytest.approx([0.0, -1 / 6, -0.5 / 6], abs=1e-6)
        assert logp.grad[1].tolist() == pytest.approx([1.1, 0.0, 0.0], abs=1e-6)
        # DAPO on the same tokens: clip-higher (1.28) and every token 1/4 of the batch
        dapo = POLICY_LOSSES["dapo"].fn(logp, torch.zeros(2, 3), t(1.0, -2.0), mask, total_tokens=4)
        assert dapo.loss.item() == pytest.approx((-1.28 - 1.0 - 0.5 + 2.2) / 4, abs=1e-6)

    def test_the_preset_is_grpo_as_published(self):
        from agentgym import load_config
        from agentgym.trainers.config import TrainConfig

        algo = load_config(TrainConfig, None, ["algorithm.name=grpo"]).algorithm
        assert (algo.loss, algo.advantage, algo.normalize_std) == ("grpo", "grpo", True)
        assert (algo.eps_low, algo.eps_high, algo.kl_coef) == (0.2, 0.2, 0.04)
        assert not (algo.dynamic_sampling or algo.overlong_penalty or algo.overlong_mask)
        with pytest.raises(ConfigError, match=r"algorithm\.name=grpo sets algorithm\.loss"):
            load_config(TrainConfig, None, ["algorithm.name=grpo", "algorithm.loss=ppo"])


class TestGSPO:
    def test_sequence_ratio_and_seq_mean_token_mean(self):
        # sequence 0: log r = (log 1.5, 0, log 0.5): s = exp(mean) = (0.75)^(1/3) = 0.9086
        # sequence 1: one token, r = 1.2: s = 1.2, clipped at 1 + eps_high = 1.1 (A > 0)
        logp = torch.tensor([[math.log(1.5), 0.0, math.log(0.5)], [math.log(1.2), 0.0, 0.0]])
        logp.requires_grad_(True)
        mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
        terms = POLICY_LOSSES["gspo"].fn(
            logp,
            torch.zeros(2, 3),
            t(1.0, 2.0),
            mask,
            total_tokens=4,
            total_sequences=2,
            eps_low=0.1,
            eps_high=0.1,
        )
        s0 = 0.75 ** (1 / 3)
        # seq 0: every token -A s0 (inside the clip), token mean -s0; seq 1: -2 * 1.1
        assert terms.loss.item() == pytest.approx((-s0 - 2 * 1.1) / 2, abs=1e-5)
        assert terms.clipped_high_tokens.item() == 1
        terms.loss.backward()
        # d/dlogp_t of -A s0 * pi_t/sg(pi_t), averaged over 3 tokens, over 2 sequences
        assert logp.grad[0].tolist() == pytest.approx([-s0 / 6] * 3, abs=1e-5)
        assert logp.grad[1].tolist() == pytest.approx([0.0, 0.0, 0.0], abs=1e-6)

    def test_invariant_under_micro_batching(self):
        torch.manual_seed(1)
        logp, old = torch.randn(4, 5) * 0.05, torch.randn(4, 5) * 0.05
        adv, mask = torch.randn(4), (torch.rand(4, 5) > 0.3).float()
        mask[:, 0] = 1.0
        kw = {"total_tokens": int(mask.sum()), "total_sequences": 4}
        fn = POLICY_LOSSES["gspo"].fn
        whole = fn(logp, old, adv, mask, **kw).loss
        parts = fn(logp[:1], old[:1], adv[:1], mask[:1], **kw).loss
        parts = parts + fn(logp[1:], old[1:], adv[1:], mask[1:], **kw).loss
        assert parts.item() == pytest.approx(whole.item(), abs=1e-6)


def test_cispo_weights_reinforce_by_a_clipped_stop_gradient_ratio():
    logp, old = ratios(1.5, 1.0, 0.5)
    terms = POLICY_LOSSES["cispo"].fn(logp, old, t(1.0), torch.ones(1, 3), total_tokens=3)
    # weights clip(r, 0.8, 1.28) = (1.28, 1, 0.8), loss = -sum w * logp / 3
    expect = -(1.28 * math.log(1.5) + 0.0 + 0.8 * math.log(0.5)) / 3
    assert terms.loss.item() == pytest.approx(expect, abs=1e-6)
    terms.loss.backward()
    # every token keeps a gradient (unlike PPO's clip): -A w / 3
    assert logp.grad.tolist()[0] == pytest.approx([-1.28 / 3, -1 / 3, -0.8 / 3], abs=1e-6)


def test_reinforce_is_minus_advantage_times_logp():
    logp, old = ratios(1.5, 1.0, 0.5)
    terms = POLICY_LOSSES["reinforce"].fn(logp, old, t(2.0), torch.ones(1, 3), total_tokens=6)
    assert terms.loss.item() == pytest.approx(-2 * (math.log(1.5) + math.log(0.5)) / 6, abs=1e-6)


def test_apo_loss_is_least_squares_on_the_sequence_log_ratio():
    # sequence log-ratio to the reference: log 1.5 + 0 + log 0.5 = log 0.75
    logp, _ = ratios(1.5, 1.0, 0.5)
    mask = torch.ones(1, 3)
    beta, adv = 0.5, 0.2
    terms = POLICY_LOSSES["apo"].fn(
        logp, logp.detach(), t(adv), mask, total_tokens=3, total_sequences=1,
        ref_logp=torch.zeros(1, 3), beta=beta,
    )  # fmt: skip
    err = beta * math.log(0.75) - adv
    assert terms.loss.item() == pytest.approx(err**2, abs=1e-6)
    terms.loss.backward()
    assert logp.grad.tolist()[0] == pytest.approx([2 * err * beta] * 3, abs=1e-6)
    with pytest.raises(ConfigError, match="ref_logp"):
        POLICY_LOSSES["apo"].fn(logp, logp, t(adv), mask, total_tokens=3, total_sequences=1)


class TestEstimators:
    def test_drgrpo_is_mean_centred_without_std(self):
        adv = group_advantages(t(1, 2, 6, 3, 3), ids(0, 0, 0, 1, 1), "drgrpo")
        assert adv.tolist() == pytest.approx([-2.0, -1.0, 3.0, 0.0, 0.0])

    def test_reinforce_pp_normalises_over_the_batch(self):
        # batch mean 2, population std sqrt(2/3): groups do not matter, singletons train
        adv = group_advantages(t(1, 2, 3), ids(0, 1, 2), "reinforce++", eps=0.0)
        s = math.sqrt(2 / 3)
        assert adv.tolist() == pytest.approx([-1 / s, 0.0, 1 / s], abs=1e-6)

    def test_apo_subtracts_the_offline_value(self):
        adv = group_advantages(t(1, 0), ids(0, 1), "apo", values=t(0.25, 0.5))
        assert adv.tolist() == pytest.approx([0.75, -0.5])
        with pytest.raises(ConfigError, match="apo-values"):
            group_advantages(t(1, 0), ids(0, 1), "apo")

    def test_optimal_value_lies_between_the_mean_and_the_max(self):
        r = t(0.0, 1.0)
        # beta * log((1 + e^(1/beta)) / 2); beta = 1: log((1 + e) / 2)
        assert optimal_value(r, 1.0) == pytest.approx(math.log((1 + math.e) / 2))
        assert optimal_value(r, 0.0) == 1.0  # beta -> 0: the best reward
        assert optimal_value(r, 1e-3) == pytest.approx(1.0 - 1e-3 * math.log(2), abs=1e-9)
        assert optimal_value(r, 1e3) == pytest.approx(0.5, abs=1e-3)  # large beta: the mean


class TestMismatchAndTIS:
    learner = torch.tensor([[0.0, math.log(2.0), math.log(0.25)]])
    engine = torch.zeros(1, 3)
    known = torch.tensor([[True, True, False]])  # the third token has no engine log-prob

    def test_mismatch_sums_and_k3(self):
        g = mismatch_stats(self.learner, self.engine, self.known)
        assert g["tokens"].item() == 2
        assert g["abs_sum"].item() == pytest.approx(math.log(2.0))
        assert g["abs_max"].item() == pytest.approx(math.log(2.0))
        assert g["k3_sum"].item() == pytest.approx(2.0 - math.log(2.0) - 1.0)

    def test_token_level_truncation(self):
        w, truncated, masked = importance_weights(
            self.learner, self.engine, self.known, mode="token", cap=1.5
        )
        assert w.tolist()[0] == pytest.approx([1.0, 1.5, 1.0])  # exp(log 2) = 2 -> 1.5
        assert truncated.item() == 1 and masked.item() == 0

    def test_sequence_level_and_mask_modes(self):
        w, truncated, _ = importance_weights(
            self.learner, self.engine, self.known, mode="sequence", cap=10.0
        )
        assert w.tolist()[0] == pytest.approx([2.0, 2.0, 1.0])  # exp(0 + log 2), known only
        w, _, masked = importance_weights(
            self.learner, self.engine, self.known, mode="mask", band=(0.5, 1.5)
        )
        assert w.tolist()[0] == [1.0, 0.0, 1.0] and masked.item() == 1

    def test_weights_scale_a_loss(self):
        logp, old = ratios(1.0, 1.0, 1.0)
        w = torch.tensor([[1.0, 0.5, 0.0]])
        terms = POLICY_LOSSES["dapo"].fn(
            logp, old, t(1.0), torch.ones(1, 3), total_tokens=3, weights=w
        )
        assert terms.loss.item() == pytest.approx(-(1.0 + 0.5) / 3)
