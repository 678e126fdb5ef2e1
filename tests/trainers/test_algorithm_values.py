"""GAE and the critic's losses on tensors small enough to compute by hand."""

from __future__ import annotations

import math

import pytest
import torch

from agentgym import ConfigError
from agentgym.trainers.algorithm import (
    decoupled_gae,
    explained_variance,
    gae,
    length_adaptive_lambda,
    positive_nll,
    terminal_rewards,
    value_loss,
)

R = torch.tensor([[0.0, 0.0, 1.0]])  # the sequence's reward on its last token
V = torch.tensor([[0.5, 0.6, 0.8]])
M = torch.ones(1, 3)


def test_lambda_one_gives_monte_carlo_returns():
    # deltas (gamma 1): 0.1, 0.2, 0.2; advantages sum them from the end
    adv, ret = gae(R, V, M, gamma=1.0, lam=1.0)
    assert adv.tolist()[0] == pytest.approx([0.5, 0.4, 0.2])
    assert ret.tolist()[0] == pytest.approx([1.0, 1.0, 1.0])


def test_lambda_zero_gives_one_step_td_errors():
    adv, ret = gae(R, V, M, gamma=1.0, lam=0.0)
    assert adv.tolist()[0] == pytest.approx([0.1, 0.2, 0.2])
    assert ret.tolist()[0] == pytest.approx([0.6, 0.8, 1.0])


def test_discounting():
    # gamma 0.5: deltas -0.2, -0.2, 0.2; A2 = 0.2, A1 = -0.2 + 0.1, A0 = -0.2 - 0.05
    adv, ret = gae(R, V, M, gamma=0.5, lam=1.0)
    assert adv.tolist()[0] == pytest.approx([-0.25, -0.1, 0.2])
    assert ret.tolist()[0] == pytest.approx([0.25, 0.5, 1.0])  # discounted Monte-Carlo


def test_an_observation_inside_a_response_passes_the_value_through():
    # [policy, observation, policy]: the observation's value (9.9) is never used; the first
    # token bootstraps from the third: delta0 = 0 + 0.8 - 0.5 = 0.3, A0 = 0.3 + 0.2
    values = torch.tensor([[0.5, 9.9, 0.8]])
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    adv, ret = gae(R, values, mask, gamma=1.0, lam=1.0)
    assert adv.tolist()[0] == pytest.approx([0.5, 0.0, 0.2])
    assert ret.tolist()[0] == pytest.approx([1.0, 0.0, 1.0])


def test_lambda_per_sequence():
    adv, _ = gae(R.repeat(2, 1), V.repeat(2, 1), M.repeat(2, 1), lam=torch.tensor([0.0, 1.0]))
    assert adv.tolist() == [pytest.approx([0.1, 0.2, 0.2]), pytest.approx([0.5, 0.4, 0.2])]
    with pytest.raises(ConfigError, match="one per sequence"):
        gae(R, V, M, lam=torch.tensor([0.5, 0.5]))


def test_length_adaptive_lambda():
    lam = length_adaptive_lambda(torch.tensor([40, 200, 10]), alpha=0.05)
    assert lam.tolist() == pytest.approx([0.5, 0.9, 0.0])  # 1 - 1/(0.05 n), at least 0


def test_decoupled_gae_takes_critic_targets_from_monte_carlo():
    adv, targets = decoupled_gae(R, V, M, lam_policy=0.0, lam_critic=1.0)
    assert adv.tolist()[0] == pytest.approx([0.1, 0.2, 0.2])
    assert targets.tolist()[0] == pytest.approx([1.0, 1.0, 1.0])


def test_terminal_rewards_sit_on_the_last_policy_token():
    mask = torch.tensor([[1, 1, 0], [0, 1, 1], [0, 0, 0]])
    out = terminal_rewards(torch.tensor([2.0, 3.0, 4.0]), mask)
    assert out.tolist() == [[0.0, 2.0, 0.0], [0.0, 0.0, 3.0], [0.0, 0.0, 0.0]]


def test_clipped_value_loss():
    # v = 0.6 moved 0.1 from old 0.5; clip 0.05 keeps 0.55: max(0.4^2, 0.45^2) = 0.2025
    v, old, target = torch.tensor([[0.6]]), torch.tensor([[0.5]]), torch.tensor([[1.0]])
    loss = value_loss(v, old, target, torch.ones(1, 1), total_tokens=1, clip=0.05)
    assert loss.item() == pytest.approx(0.5 * 0.2025)
    unclipped = value_loss(v, old, target, torch.ones(1, 1), total_tokens=2, clip=None)
    assert unclipped.item() == pytest.approx(0.5 * 0.16 / 2)  # token mean over the batch


def test_positive_example_nll_and_explained_variance():
    logp = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]])
    nll = positive_nll(logp, torch.ones(2, 2), torch.tensor([True, False]), total_tokens=2)
    assert nll.item() == pytest.approx(1.5)
    targets, mask = torch.tensor([[1.0, 2.0, 3.0]]), torch.ones(1, 3)
    assert explained_variance(targets, targets, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full((1, 3), 2.0), targets, mask) == pytest.approx(0.0)
    assert math.isnan(explained_variance(targets, torch.ones(1, 3), mask))
