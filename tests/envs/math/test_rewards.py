"""Correctness rewards and token costs, against hand-computed values."""

from __future__ import annotations

import pytest

from agentgym.envs.math.rewards import RewardConfig
from agentgym.errors import ConfigError, UnknownNameError


def test_binary_and_signed_schemes():
    assert RewardConfig().score(True, 500)[0] == 1.0
    assert RewardConfig().score(False, 500)[0] == 0.0
    assert RewardConfig(reward_scheme="signed").score(False, 10)[0] == -1.0
    custom = RewardConfig(correct_reward=2.0, incorrect_reward=-0.5)
    assert (custom.score(True, 0)[0], custom.score(False, 0)[0]) == (2.0, -0.5)


def test_linear_cost_charges_correct_answers_by_default():
    cfg = RewardConfig(token_cost="linear", linear_lambda=0.2, max_response_tokens=1000)
    reward, terms = cfg.score(True, 250)
    assert reward == pytest.approx(1.0 - 0.2 * 250 / 1000)
    assert terms["penalty_linear"] == pytest.approx(-0.05)
    assert terms["token_cost_applied"] is True
    wrong, wterms = cfg.score(False, 250)
    assert wrong == 0.0 and wterms["penalty_linear"] == 0.0 and not wterms["token_cost_applied"]
    always = RewardConfig(
        token_cost="linear", linear_lambda=0.2, linear_budget=500, token_cost_on="all"
    )
    assert always.score(False, 250)[0] == pytest.approx(-0.1)


def test_target_cost_is_symmetric_around_the_target():
    cfg = RewardConfig(token_cost="target", target_tokens=100, target_alpha=0.002)
    assert cfg.score(True, 100)[0] == 1.0
    assert cfg.score(True, 150)[0] == pytest.approx(0.9)
    assert cfg.score(True, 50)[0] == pytest.approx(0.9)
    assert cfg.score(True, 150)[1]["penalty_target"] == pytest.approx(-0.1)


@pytest.mark.parametrize(
    ("tokens", "penalty"),
    [(0, 0.0), (768, 0.0), (769, -1 / 256), (896, -0.5), (1024, -1.0), (5000, -1.0)],
)
def test_dapo_overlong_shape(tokens: int, penalty: float):
    cfg = RewardConfig(token_cost="overlong", max_response_tokens=1024, overlong_cache=256)
    reward, terms = cfg.score(False, tokens)  # applies to wrong answers too (as in DAPO)
    assert terms["penalty_overlong"] == pytest.approx(penalty)
    assert reward == pytest.approx(penalty)


def test_overlong_cache_defaults_to_a_quarter():
    assert RewardConfig(token_cost="overlong", max_response_tokens=400).cache == 100


def test_inactive_terms_are_zero_and_never_negative_zero():
    _, terms = RewardConfig().score(True, 10_000)
    assert terms["token_penalty"] == 0.0
    for k in ("penalty_linear", "penalty_target", "penalty_overlong"):
        assert terms[k] == 0.0 and str(terms[k]) == "0.0"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"reward_scheme": "binry"}, UnknownNameError, "binary"),
        ({"token_cost": "lenear"}, UnknownNameError, "linear"),
        ({"token_cost": "target"}, ConfigError, "target_tokens"),
        ({"token_cost_on": "sometimes"}, ConfigError, "token_cost_on"),
        ({"max_response_tokens": 0}, ConfigError, "max_response_tokens"),
        ({"linear_lambda": -1}, ConfigError, ">= 0"),
        ({"overlong_cache": 2000}, ConfigError, "overlong_cache"),
        ({"correct_reward": 0.0}, ConfigError, "larger than"),
    ],
)
def test_bad_configuration_says_what_to_do(kwargs, error, match):
    with pytest.raises(error, match=match):
        RewardConfig(**kwargs)
