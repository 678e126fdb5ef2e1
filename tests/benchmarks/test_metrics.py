"""Metrics: hand-computed values for pass@k, efficiency, the balanced score and the CIs."""

from __future__ import annotations

import math

import pytest

from agentgym import episode_accuracy, episode_tokens
from agentgym.benchmarks.metrics import (
    TaskOutcome,
    compute_metrics,
    efficiency,
    mean_with_ci,
    pass_at_k,
    success,
)
from agentgym.benchmarks.metrics import (
    tests_counts as count_tests,
)
from agentgym.errors import ConfigError
from agentgym.types import Completion, Episode, Message, Turn


def ep(reward=0.0, breakdown=None, tokens=(10,), texts=None) -> Episode:
    turns = [
        Turn(
            messages=(Message("user", "q"),),
            completion=Completion(text=(texts or ["x"] * len(tokens))[i], num_tokens=n),
        )
        for i, n in enumerate(tokens)
    ]
    return Episode("e", "t", 0, turns=turns, reward=reward, reward_breakdown=breakdown or {})


def test_pass_at_k_matches_the_unbiased_estimator():
    assert pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(4, 1, 4) == 1.0
    # n=4, c=1, k=1: 1 - C(3,1)/C(4,1) = 1/4
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)


def test_efficiency_is_one_then_log_linear_then_zero():
    assert efficiency(10, 256, 4096) == 1.0
    assert efficiency(256, 256, 4096) == 1.0
    assert efficiency(512, 256, 4096) == pytest.approx(0.75)  # one of four doublings
    assert efficiency(1024, 256, 4096) == pytest.approx(0.5)
    assert efficiency(4096, 256, 4096) == 0.0
    assert efficiency(10_000, 256, 4096) == 0.0


def test_balanced_score_credits_only_correct_answers_by_their_length():
    t = TaskOutcome("a/0", "a", "e", 0)
    t.add(ep(breakdown={"correct": True}, tokens=(100,)), "correct")  # 1.0
    t.add(ep(breakdown={"correct": True}, tokens=(1024,)), "correct")  # 0.5
    t.add(ep(breakdown={"correct": False}, tokens=(5,)), "correct")  # 0 (wrong)
    t.add(ep(breakdown={"correct": False}, tokens=(4000,)), "correct")  # 0
    assert t.value("balanced", 4, 256, 4096) == pytest.approx(1.5 / 4)
    assert t.value("accuracy", 4, 256, 4096) == pytest.approx(0.5)
    assert t.value("pass_at_k", 4, 256, 4096) == 1.0
    assert t.value("mean_tokens", 4, 256, 4096) == pytest.approx((100 + 1024 + 5 + 4000) / 4)


def test_success_rules():
    assert success(ep(breakdown={"correct": True}, reward=-0.2), "correct")
    assert not success(ep(breakdown={"correct": False}, reward=1.0), "correct")
    assert success(ep(reward=1.0), "full_reward") and not success(ep(reward=0.99), "full_reward")
    assert success(ep(breakdown={"tests_passed": 3, "tests_total": 3}), "all_tests")
    assert not success(ep(breakdown={"tests_passed": 2, "tests_total": 3}), "all_tests")
    assert not success(ep(breakdown={"tests_passed": 0, "tests_total": 0}), "all_tests")
    assert not success(ep(), "all_tests")
    assert count_tests(ep(breakdown={"tests": {"passed": 1, "total": 4}})) == (1, 4)
    with pytest.raises(ConfigError):
        success(ep(), "nope")


def test_tokens_sum_over_turns_and_fall_back_to_an_approximation():
    assert episode_tokens(ep(tokens=(3, 4, 5))) == 12
    e = Episode("e", "t", 0, turns=[Turn((Message("user", "q"),), Completion(text="a" * 40))])
    assert episode_tokens(e) == 10  # ceil(40 bytes / 4)


def test_bootstrap_interval_brackets_the_mean_and_is_reproducible():
    values = [0, 1, 1, 0, 1, 1, 1, 0, 1, 1] * 3
    a, b = mean_with_ci(values), mean_with_ci(values)
    assert a == b
    assert a["value"] == pytest.approx(0.7)
    assert a["ci_low"] < 0.7 < a["ci_high"]
    # roughly the normal approximation, 0.7 ± 1.96 * sd/sqrt(n)
    half = 1.96 * math.sqrt(0.7 * 0.3 / 30)
    assert a["ci_low"] == pytest.approx(0.7 - half, abs=0.06)
    assert a["ci_high"] == pytest.approx(0.7 + half, abs=0.06)
    assert a["n"] == 30
    const = mean_with_ci([1.0] * 8)
    assert const["ci_low"] == const["ci_high"] == 1.0 and const["stderr"] == 0.0
    assert mean_with_ci([])["value"] is None


def test_compute_metrics_averages_over_tasks_not_episodes():
    a = TaskOutcome("a/0", "a", "e", 0)
    b = TaskOutcome("a/1", "a", "e", 1)
    for _ in range(3):
        a.add(ep(reward=1.0), "full_reward")
    b.add(ep(reward=0.0), "full_reward")  # an incomplete task still counts once
    m = compute_metrics(
        [a, b, TaskOutcome("a/2", "a", "e", 2)],
        ["accuracy", "reward"],
        k=3,
        reference_tokens=10,
        max_credit_tokens=20,
    )
    assert m["accuracy"]["value"] == pytest.approx(0.5)
    assert m["accuracy"]["n"] == 2  # the task without episodes is not scored


def test_episode_accuracy_and_the_correct_rule_read_the_breakdown_alike():
    """The trainer's accuracy and the benchmarks' ``correct`` rule share one reading."""
    assert episode_accuracy(ep(breakdown={"correct": True})) == 1.0
    assert episode_accuracy(ep(breakdown={"correct": False})) == 0.0
    assert episode_accuracy(ep(breakdown={"correct": 3, "asked": 4})) == 0.75
    assert episode_accuracy(ep(breakdown={"correct": 2, "total": 2})) == 1.0
    assert episode_accuracy(ep(breakdown={})) is None
    assert success(ep(breakdown={"correct": True}), "correct")
    assert success(ep(breakdown={"correct": 2, "total": 2}), "correct")
    # a count counts as solved only when every part is right
    assert not success(ep(breakdown={"correct": 3, "asked": 4}), "correct")
    assert not success(ep(breakdown={}), "correct")
