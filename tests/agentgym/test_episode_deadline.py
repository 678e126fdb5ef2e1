"""An episode attempt that never ends (a hung policy call, an env call that never returns)
fails at ``episode_timeout_s`` naming where it was stuck, and the rollout returns
(issue 35). Each rollout is bounded by ``asyncio.wait_for``: a hang fails the test."""

from __future__ import annotations

import asyncio
import threading

import pytest
from toy_envs import CounterEnv

from agentgym import ConfigError, failed_attempts
from agentgym.policies import OraclePolicy
from agentgym.rollouts import rollout_async

LIMIT_S = 30.0


class HungPolicy:
    """A policy whose calls never return (an endpoint that accepted and went silent)."""

    async def __call__(self, messages, sampling):
        await asyncio.sleep(3600)


class HangsInStepEnv(CounterEnv):
    """A counter env whose first step blocks its thread until ``release`` is set (a frozen
    sandbox, a grader that never answers)."""

    release = threading.Event()

    def _act(self, action):
        self.release.wait(LIMIT_S * 2)
        return super()._act(action)


def _bounded(coro):
    return asyncio.run(asyncio.wait_for(coro, LIMIT_S))


@pytest.mark.parametrize("retries", [0, 1])
def test_a_hung_policy_call_fails_the_episode_at_its_deadline(retries):
    eps = _bounded(
        rollout_async(
            lambda: CounterEnv(target=2),
            HungPolicy(),
            seeds=[0, 1],
            concurrency=1,
            retries=retries,
            episode_timeout_s=0.2,
        )
    )
    assert len(eps) == 2
    for ep in eps:
        assert ep.failure.reason == "episode_timeout" and ep.failure.where == "policy"
        assert "episode_timeout_s=0.2" in ep.failure.message
        assert failed_attempts(ep) == ["episode_timeout"] * retries


def test_an_env_call_that_never_returns_fails_and_the_rollout_returns():
    HangsInStepEnv.release.clear()
    try:
        eps = _bounded(
            rollout_async(
                lambda: HangsInStepEnv(target=2),
                OraclePolicy(),
                seeds=[0, 1],
                concurrency=2,
                episode_timeout_s=0.3,
            )
        )
    finally:
        HangsInStepEnv.release.set()  # let the abandoned threads finish
    assert [ep.failure.reason for ep in eps] == ["episode_timeout"] * 2
    assert {ep.failure.where for ep in eps} == {"step"}


def test_episodes_within_their_deadline_are_untouched():
    eps = _bounded(
        rollout_async(
            lambda: CounterEnv(target=2),
            OraclePolicy(),
            seeds=[0, 1, 2],
            concurrency=2,
            episode_timeout_s=10.0,
        )
    )
    assert [ep.failure for ep in eps] == [None] * 3 and all(ep.reward == 1.0 for ep in eps)


def test_a_deadline_must_be_positive():
    with pytest.raises(ConfigError, match="episode_timeout_s must be > 0"):
        _bounded(rollout_async(lambda: CounterEnv(), OraclePolicy(), episode_timeout_s=0))
