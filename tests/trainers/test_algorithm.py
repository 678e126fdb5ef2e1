"""DAPO's maths on tensors small enough to compute by hand."""

from __future__ import annotations

import math

import pytest
import torch

from agentgym.errors import ConfigError, UnknownNameError
from agentgym.trainers.algorithm import (
    dapo_policy_loss,
    group_advantages,
    informative_groups,
    length_reward,
    logprobs_and_entropy,
    masked_mean,
    overlong_penalty,
    selected_logprobs,
    token_entropy,
)


def t(*xs):
    return torch.tensor(xs, dtype=torch.float32)


def ids(*xs):
    return torch.tensor(xs, dtype=torch.long)


class TestAdvantages:
    def test_grpo_normalises_by_unbiased_group_std(self):
        # group 0: [1, 0, 0, 1] mean 0.5, unbiased std sqrt(1/3); group 1: [1, 2, 3] mean 2, std 1
        adv = group_advantages(t(1, 0, 0, 1, 1, 2, 3), ids(0, 0, 0, 0, 7, 7, 7), "grpo", eps=0.0)
        s = 0.5 / math.sqrt(1 / 3)
        assert adv.tolist() == pytest.approx([s, -s, -s, s, -1.0, 0.0, 1.0], abs=1e-6)

    def test_grpo_without_std_is_mean_centred(self):
        adv = group_advantages(t(1, 2, 6), ids(0, 0, 0), "grpo", normalize_std=False)
        assert adv.tolist() == pytest.approx([-2.0, -1.0, 3.0])

    def test_group_ids_need_not_be_contiguous(self):
        adv = group_advantages(t(1, 5, 0, 3), ids(4, 9, 4, 9), "grpo", normalize_std=False)
        assert adv.tolist() == pytest.approx([0.5, 1.0, -0.5, -1.0])

    def test_rloo_uses_leave_one_out_mean(self):
        # r_i - mean of the others: 1 - 1/3, 0 - 2/3
        adv = group_advantages(t(1, 0, 0, 1), ids(0, 0, 0, 0), "rloo")
        assert adv.tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3], abs=1e-6)

    def test_apo_group_subtracts_best_of_group(self):
        # (named "apo" before the published A*PO, which subtracts an offline V*, arrived)
        adv = group_advantages(t(1, 2, 3, 0.5, 0.25), ids(0, 0, 0, 1, 1), "apo_group")
        assert adv.tolist() == pytest.approx([-2.0, -1.0, 0.0, 0.0, -0.25])

    @pytest.mark.parametrize("estimator", ["grpo", "drgrpo", "rloo", "apo_group"])
    def test_all_equal_and_singleton_groups_get_zero(self, estimator):
        adv = group_advantages(t(1, 1, 1, 5), ids(0, 0, 0, 1), estimator)
        assert adv.tolist() == [0.0, 0.0, 0.0, 0.0]

    def test_unknown_estimator_suggests(self):
        with pytest.raises(UnknownNameError, match="rloo"):
            group_advantages(t(1, 0), ids(0, 0), "rlo")


def test_informative_groups_drops_all_equal_groups():
    keep = informative_groups(t(1, 1, 0, 1, 0, 0, 3), ids(0, 0, 1, 1, 2, 2, 3))
    assert keep.tolist() == [False, False, True, True, False, False, False]


def test_overlong_penalty_matches_paper_ramp():
    # L_max = 10, L_cache = 4: free up to 6, then (6 - |y|)/4, -1 beyond 10
    out = overlong_penalty(t(5, 6, 8, 10, 11), max_length=10, cache_length=4)
    assert out.tolist() == pytest.approx([0.0, 0.0, -0.5, -1.0, -1.0])
    with pytest.raises(ConfigError):
        overlong_penalty(t(1), max_length=4, cache_length=5)


def test_length_reward_kimi():
    # lambda = 0.5 - (len - 10) / 20 -> [0.5, 0, -0.5]; wrong answers get min(0, lambda)
    out = length_reward(
        t(10, 20, 30, 10, 20, 30), torch.tensor([1, 1, 0, 0, 1, 1]), ids(0, 0, 0, 1, 1, 1)
    )
    assert out.tolist() == pytest.approx([0.5, 0.0, -0.5, 0.0, 0.0, -0.5])
    same = length_reward(t(7, 7), torch.tensor([1, 0]), ids(0, 0))
    assert same.tolist() == [0.0, 0.0]


class TestDapoLoss:
    ratios = (1.5, 1.0, 0.5)

    def _logp(self):
        old = torch.zeros(1, 3)
        logp = torch.log(torch.tensor([self.ratios])).requires_grad_(True)
        return logp, old

    def test_clip_higher_positive_advantage(self):
        logp, old = self._logp()
        terms = dapo_policy_loss(logp, old, t(1.0), torch.ones(1, 3), total_tokens=3)
        # per token: max(-1.5, -1.28) = -1.28, -1, max(-0.5, -0.8) = -0.5
        assert terms.loss.item() == pytest.approx((-1.28 - 1.0 - 0.5) / 3, abs=1e-6)
        assert terms.clipped_high_tokens.item() == 1
        assert terms.clipped_low_tokens.item() == 0
        terms.loss.backward()
        # d/dlogp of -A r / 3 = -r / 3 where unclipped, 0 where clipped
        assert logp.grad.tolist()[0] == pytest.approx([0.0, -1 / 3, -0.5 / 3], abs=1e-6)

    def test_clip_low_negative_advantage(self):
        logp, old = self._logp()
        terms = dapo_policy_loss(logp, old, t(-1.0), torch.ones(1, 3), total_tokens=3)
        # per token: max(1.5, 1.28) = 1.5, 1, max(0.5, 0.8) = 0.8
        assert terms.loss.item() == pytest.approx((1.5 + 1.0 + 0.8) / 3, abs=1e-6)
        assert terms.clipped_low_tokens.item() == 1
        assert terms.clipped_high_tokens.item() == 0

    def test_eps_high_is_separate_from_eps_low(self):
        logp, old = self._logp()
        loose = dapo_policy_loss(logp, old, t(1.0), torch.ones(1, 3), total_tokens=3, eps_high=0.6)
        assert loose.clipped_high_tokens.item() == 0
        assert loose.loss.item() == pytest.approx((-1.5 - 1.0 - 0.5) / 3, abs=1e-6)

    def test_mask_and_total_token_normaliser(self):
        logp = torch.zeros(2, 3, requires_grad=True)
        mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
        terms = dapo_policy_loss(logp, logp.detach(), t(2.0, -1.0), mask, total_tokens=10)
        # ratio 1: sum of -A over masked tokens = -2 -2 +1 = -3, over 10 tokens
        assert terms.loss.item() == pytest.approx(-0.3)
        assert terms.tokens.item() == 3

    def test_micro_batches_sum_to_the_whole_batch_loss(self):
        torch.manual_seed(0)
        logp = torch.randn(4, 5) * 0.1
        old = logp + torch.randn(4, 5) * 0.2
        adv = torch.randn(4)
        mask = (torch.rand(4, 5) > 0.3).float()
        n = int(mask.sum())
        whole = dapo_policy_loss(logp, old, adv, mask, total_tokens=n).loss
        parts = sum(
            dapo_policy_loss(
                logp[i : i + 2], old[i : i + 2], adv[i : i + 2], mask[i : i + 2], total_tokens=n
            ).loss
            for i in (0, 2)
        )
        assert parts.item() == pytest.approx(whole.item(), abs=1e-6)
        # a long response is not down-weighted: every token weighs 1/n
        long_only = dapo_policy_loss(logp[:1], logp[:1], t(1.0), torch.ones(1, 5), total_tokens=10)
        assert long_only.loss.item() == pytest.approx(-0.5)

    def test_kl_k3_estimator(self):
        logp = torch.zeros(1, 2)
        ref = torch.tensor([[math.log(2.0), 0.0]])
        terms = dapo_policy_loss(
            logp, logp, t(0.0), torch.ones(1, 2), total_tokens=2, ref_logp=ref, kl_coef=0.5
        )
        k3 = 2.0 - math.log(2.0) - 1.0  # exp(d) - d - 1 with d = log 2; second token 0
        assert terms.kl_loss.item() == pytest.approx(k3 / 2, abs=1e-6)
        assert terms.loss.item() == pytest.approx(0.5 * k3 / 2, abs=1e-6)
        with pytest.raises(ConfigError):
            dapo_policy_loss(logp, logp, t(0.0), torch.ones(1, 2), total_tokens=2, kl_coef=0.1)


def test_selected_logprobs_and_entropy():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25]]]))
    assert selected_logprobs(logits, ids(1).view(1, 1)).item() == pytest.approx(math.log(0.25))
    # temperature 2 on these logits: p ∝ sqrt(p) = [0.7071, 0.5, 0.5] / 1.7071
    assert selected_logprobs(logits, ids(0).view(1, 1), temperature=2.0).item() == pytest.approx(
        math.log(0.70710678 / 1.70710678), abs=1e-6
    )
    h = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    assert token_entropy(logits).item() == pytest.approx(h, abs=1e-6)
    assert masked_mean(t(1, 2, 3), t(1, 0, 1)).item() == pytest.approx(2.0)


def test_logprobs_and_entropy_in_one_pass():
    """The fused pass gives selected_logprobs' log-probs bit for bit (and the same
    gradient) and token_entropy's entropy; the entropy carries no gradient."""
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 5, 40, generator=gen) * 4).requires_grad_()
    targets = torch.randint(0, 40, (3, 5), generator=gen)
    for temp in (1.0, 0.7):
        logp, ent = logprobs_and_entropy(logits, targets, temp)
        ref = selected_logprobs(logits, targets, temp)
        assert torch.equal(logp, ref)
        assert not ent.requires_grad
        torch.testing.assert_close(ent, token_entropy(logits.detach(), temp), atol=1e-5, rtol=1e-5)
        (grad,) = torch.autograd.grad(logp.sum(), logits)
        (want,) = torch.autograd.grad(ref.sum(), logits)
        assert torch.equal(grad, want)
    h = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    one = torch.log(torch.tensor([[[0.5, 0.25, 0.25]]]))
    assert logprobs_and_entropy(one, ids(0).view(1, 1))[1].item() == pytest.approx(h, abs=1e-6)
