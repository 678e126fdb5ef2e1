"""generate()'s cache: the same problems as without it, shared safely, errors not cached."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import agentgym.envs.math.generator.dispatch as gen  # _generate, _generate_cached: the cache's internals
from agentgym.envs.math.generator import ANSWER_FORMATS, KINDS, LEVELS
from agentgym.errors import ConfigError, UnknownNameError


@pytest.mark.parametrize("kind", KINDS)
def test_cached_problems_equal_fresh_ones(kind):
    for level in LEVELS:
        for seed in (0, 1, 17, 2**31 - 2):
            for fmt in ANSWER_FORMATS:
                fresh = gen._generate(seed, level, kind, fmt)
                assert gen.generate(seed, level, kind, answer_format=fmt) == fresh
                assert gen.generate(seed, level, kind, answer_format=fmt) == fresh
    assert gen.generate(42) == gen._generate(42, None, None, "boxed")


def test_repeated_calls_share_one_immutable_problem():
    gen._generate_cached.cache_clear()
    a = gen.generate(123, 3, "quadratic")
    b = gen.generate(123, 3, "quadratic")
    assert a is b
    assert gen._generate_cached.cache_info().hits == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.answer = "0"  # type: ignore[misc]
    # other arguments are other entries
    assert gen.generate(123, 3, "quadratic", answer_format="answer_line") is not a
    assert gen.generate(124, 3, "quadratic") != a


def test_non_plain_arguments_bypass_the_cache_and_keep_their_types():
    gen._generate_cached.cache_clear()
    p = gen.generate(np.int64(9), 1, "arithmetic")
    assert type(p.seed) is np.int64
    assert gen._generate_cached.cache_info().currsize == 0
    assert dataclasses.replace(p, seed=9) == gen.generate(9, 1, "arithmetic")


def test_errors_are_raised_every_time():
    for _ in range(2):
        with pytest.raises(UnknownNameError):
            gen.generate(1, 1, "calculus")
        with pytest.raises(ConfigError):
            gen.generate(1, 4, "linear")
        with pytest.raises(UnknownNameError):
            gen.generate(1, 1, "linear", answer_format="latex")
