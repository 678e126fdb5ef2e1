"""``BalancedMathConfig``: the settings of ``agentgym/BalancedMath-v0`` and how ``make``'s
keywords map onto them."""

from __future__ import annotations

import dataclasses
import inspect

import gymnasium as gym
import pytest

import agentgym
from agentgym import MemoryConfig
from agentgym.envs.math import (
    BalancedMathConfig,
    BalancedMathEnv,
    MathAnswers,
    MathLimits,
    MathProblems,
    RewardConfig,
)
from agentgym.envs.math.config import MATH_SUMMARY_PROMPT, SETTING_GROUPS, SETTING_NAMES
from agentgym.errors import ConfigError, UnknownNameError
from agentgym.registration import env_arguments

ENV_ID = "agentgym/BalancedMath-v0"

#: what configs/*.yaml and the docs pass today
QUICKSTART = {
    "kinds": "arithmetic",
    "levels": 1,
    "answer_format": "answer_line",
    "prompt_template": "{problem}",
    "token_cost": "linear",
    "linear_lambda": 0.5,
    "linear_budget": 64,
}


def _make(**kwargs) -> BalancedMathEnv:
    return gym.make(ENV_ID, **kwargs).unwrapped


def test_each_keyword_belongs_to_exactly_one_group():
    names = [f.name for cls in SETTING_GROUPS.values() for f in dataclasses.fields(cls)]
    assert (
        len(names) == len(set(names)) == len(SETTING_NAMES) == 26
    )  # + count_tokens, render_mode: 28
    assert set(SETTING_GROUPS) == {f.name for f in dataclasses.fields(BalancedMathConfig)}


def test_keywords_land_in_their_groups():
    env = _make(**QUICKSTART, memory={"token_budget": 200, "summary_max_tokens": 40})
    cfg = env.config
    assert cfg.problems.kinds == ("arithmetic",) and cfg.problems.levels == (1,)
    assert cfg.answers.answer_format == "answer_line" and cfg.answers.template == "{problem}"
    assert cfg.rewards == RewardConfig(token_cost="linear", linear_lambda=0.5, linear_budget=64)
    assert cfg.limits.memory.enabled and cfg.limits.memory.token_budget == 200
    assert cfg.limits.memory.summary_prompt == MATH_SUMMARY_PROMPT
    # the env's attributes read from the config
    assert (env.kinds, env.levels, env.answer_format) == (("arithmetic",), (1,), "answer_line")
    assert env.rewards is cfg.rewards and env.max_turns == 32  # memory mode's default


def test_a_ready_config_makes_the_same_env_as_the_keywords():
    config = BalancedMathConfig.from_settings(**QUICKSTART)
    by_kwargs, by_config = _make(**QUICKSTART), _make(config=config)
    assert by_config.config == by_kwargs.config == config
    for seed in range(3):
        assert by_config.reset(seed=seed) == by_kwargs.reset(seed=seed)
        reply = by_kwargs.oracle_action(by_kwargs.reset(seed=seed)[0])
        by_config.reset(seed=seed)
        assert by_config.step(reply)[1:] == by_kwargs.step(reply)[1:]


def test_keywords_given_with_a_config_replace_its_fields():
    config = BalancedMathConfig(
        problems=MathProblems(kinds=["linear", "quadratic"]),
        rewards=RewardConfig(token_cost="linear"),
    )
    env = _make(config=config, levels="2", linear_lambda="0.25")
    assert env.kinds == ("linear", "quadratic") and env.levels == (2,)
    assert env.rewards.token_cost == "linear" and env.rewards.linear_lambda == 0.25
    assert config.problems.levels is None  # the config itself is not changed


def test_settings_round_trip_and_the_config_is_frozen_and_hashable():
    config = BalancedMathConfig.from_settings(**QUICKSTART, max_turns=3)
    assert BalancedMathConfig.from_settings(**config.settings()) == config
    assert hash(config) == hash(BalancedMathConfig.from_settings(**QUICKSTART, max_turns=3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.limits = MathLimits()  # type: ignore[misc]


def test_defaults_are_the_envs_defaults():
    cfg = BalancedMathConfig()
    assert cfg.problems.kind_choices == agentgym.envs.math.KINDS
    assert cfg.problems.level_choices == (1, 2, 3)
    assert cfg.answers == MathAnswers()
    assert cfg.limits.memory == MemoryConfig(summary_prompt=MATH_SUMMARY_PROMPT)
    assert cfg.limits.turn_limit is None
    assert MathLimits(memory=True).turn_limit == 32 and MathLimits(max_turns=5).turn_limit == 5


def test_string_values_from_the_command_line_are_converted_as_before():
    cfg = BalancedMathConfig.from_settings(max_response_tokens="512", target_alpha="0.01")
    assert cfg.rewards.max_response_tokens == 512 and cfg.rewards.target_alpha == 0.01


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: _make(level=2), UnknownNameError, "Did you mean: 'levels'"),
        (lambda: _make(count_token=len), UnknownNameError, "'count_tokens'"),
        (lambda: _make(config={"levels": 1}), ConfigError, "BalancedMathConfig"),
        (lambda: BalancedMathConfig().with_settings(tokn_cost="x"), UnknownNameError, "token_cost"),
        (lambda: BalancedMathConfig(rewards={"token_cost": "x"}), ConfigError, "RewardConfig"),
        (lambda: MathProblems(source="hard", kinds="linear"), ConfigError, "generator"),
        (lambda: MathProblems(levels=4), ConfigError, "levels"),
        (lambda: MathAnswers(hedging="first"), UnknownNameError, "hedging"),
        (lambda: MathLimits(max_turns=0), ConfigError, "max_turns"),
        (lambda: MathLimits(memory="on"), ConfigError, "memory"),
        (lambda: BalancedMathConfig.from_settings(linear_lambda="a lot"), ConfigError, "number"),
    ],
)
def test_bad_settings_fail_when_the_config_is_built(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_the_signature_lists_every_keyword_make_takes():
    params = inspect.signature(BalancedMathEnv).parameters
    assert set(params) == {*SETTING_NAMES, "config", "count_tokens", "render_mode"}
    assert params["max_response_tokens"].default == 1024
    known = set(env_arguments(ENV_ID))
    assert set(params) <= known and "max_action_chars" not in known


def test_the_spec_sheet_names_every_keyword():
    doc = inspect.getdoc(BalancedMathEnv)
    arguments = doc[doc.index("**Arguments.**") : doc.index("**Version history.**")]
    for name in (*SETTING_NAMES, *SETTING_GROUPS, "config", "count_tokens", "render_mode"):
        assert f"``{name}``" in arguments or f"``config.{name}``" in arguments, name
