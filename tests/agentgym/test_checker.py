"""The checker passes every registered env and catches contract violations."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
from toy_envs import CounterEnv

import agentgym
from agentgym.checker import EnvCheckError, check_env

# AppGen needs sandboxes; it has its own checker test in tests/envs/appgen.
FAST_IDS = [i for i in agentgym.agentgym_env_ids() if "AppGen" not in i]


@pytest.mark.parametrize("env_id", FAST_IDS)
def test_every_registered_env_passes_the_checker(env_id):
    report = check_env(gym.make(env_id))
    assert "same seed + same actions -> same episode" in report.passed
    assert "close() twice" in report.passed


def test_toy_env_with_memory_passes_including_memory_checks():
    report = check_env(CounterEnv(target=6, memory={"every_k_turns": 2}))
    assert any(name.startswith("memory turns well formed") for name in report.passed)
    assert report.episodes[0]["conversations"] >= 2


class RewardsEarly(CounterEnv):
    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        return obs, (reward if term or trunc else 0.1), term, trunc, info


class Nondeterministic(CounterEnv):
    calls = 0

    def _begin(self, seed, options):
        Nondeterministic.calls += 1
        task = super()._begin(seed, options)
        self.target = 3 + Nondeterministic.calls % 2
        return task

    def _score(self, end_reason: str) -> tuple[float, dict[str, Any]]:
        return 0.0, {"target": self.target}


class ForgetsMemory(CounterEnv):
    def _opening(self, memory):
        return super()._opening(None if memory is None else "")


@pytest.mark.parametrize(
    ("env", "match"),
    [
        (RewardsEarly(), "non-terminal step returned reward"),
        (Nondeterministic(), "different"),
        (ForgetsMemory(target=6, memory={"every_k_turns": 2}), "memory"),
    ],
)
def test_checker_catches_contract_violations(env, match):
    with pytest.raises(EnvCheckError, match=match):
        check_env(env, skip_gymnasium=True)
