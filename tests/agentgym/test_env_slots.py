"""Env slots of a local rollout: every episode gets one, also when others failed (issue 35).

A rollout runs all its episodes at once but holds at most ``concurrency`` envs; the others
wait for a slot. A failed episode's env is closed, not given back: its slot must still
go to a waiting episode, or the rollout never returns. Each rollout here is bounded by
``asyncio.wait_for``, so a hang fails the test instead of freezing it.
"""

from __future__ import annotations

import asyncio

import gymnasium as gym
import pytest
from toy_envs import CounterEnv, FailsOnSeedsEnv

from agentgym import InfraError, LocalEnvs
from agentgym.errors import EnvStateError
from agentgym.local_envs import LocalRollout
from agentgym.policies import OraclePolicy
from agentgym.rollouts import rollout_async

ENV_ID = "agentgym-test/FailsOnSeeds-v0"
if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=FailsOnSeedsEnv, disable_env_checker=True)

#: far longer than any rollout here takes (well under a second); a hang hits it
LIMIT_S = 30.0


def _rollout(seeds, fail_seeds, retries, **kwargs):
    """One rollout on 1 env slot, bounded by ``LIMIT_S``."""
    run = rollout_async(
        ENV_ID,
        OraclePolicy(),
        seeds=seeds,
        env_kwargs={"fail_seeds": tuple(fail_seeds), "target": 2},
        concurrency=1,
        retries=retries,
        **kwargs,
    )
    return asyncio.run(asyncio.wait_for(run, LIMIT_S))


@pytest.mark.parametrize("retries", [0, 1, 2])
def test_episodes_that_fail_every_attempt_on_one_slot_all_come_back_failed(retries):
    eps = _rollout([0, 1, 2], fail_seeds=[0, 1, 2], retries=retries)
    assert [e.seed for e in eps] == [0, 1, 2]
    for ep in eps:
        assert ep.failed and ep.failure.reason == "sandbox_died" and ep.failure.where == "step"
        assert "container died" in ep.failure.message
        assert ep.metrics.get("rollout/failed_attempts", []) == ["sandbox_died"] * retries


@pytest.mark.parametrize("retries", [0, 1, 2])
def test_failing_and_succeeding_tasks_on_one_slot_are_all_accounted_for(retries):
    host = LocalEnvs(keep=True)  # the slot's env is taken from and given back to the host
    with host:
        eps = _rollout([5, 6, 7, 8], fail_seeds=[5, 7], retries=retries, env_host=host)
        assert [e.seed for e in eps] == [5, 6, 7, 8]
        assert [e.failed for e in eps] == [True, False, True, False]
        for ep in eps[0::2]:
            assert ep.failure.reason == "sandbox_died"
            assert ep.metrics.get("rollout/failed_attempts", []) == ["sandbox_died"] * retries
        assert all(e.reward == 1.0 and e.failure is None for e in eps[1::2])
        assert len(host) <= 1  # one slot, so at most one env (kept if its last episode went well)
        again = _rollout([6], fail_seeds=[5, 7], retries=retries, env_host=host)
        assert not again[0].failed and again[0].reward == 1.0


def test_envs_that_cannot_be_made_fail_every_episode_and_the_rollout_returns():
    def factory():
        raise InfraError("the Docker engine is gone", reason="docker_unreachable")

    run = rollout_async(factory, OraclePolicy(), seeds=[0, 1, 2], concurrency=1, retries=1)
    eps = asyncio.run(asyncio.wait_for(run, LIMIT_S))
    assert [(e.failure.reason, e.failure.where) for e in eps] == [
        ("docker_unreachable", "make")
    ] * 3


def test_a_slot_freed_by_a_failure_or_a_cancelled_wait_goes_to_the_next_waiter():
    async def main():
        host = LocalEnvs(threads=1)
        slots = LocalRollout(lambda: CounterEnv(), None, 1, host)
        first = await slots.acquire()
        cancelled = asyncio.ensure_future(slots.acquire())  # waits, then gives up
        waiting = asyncio.ensure_future(slots.acquire())
        await asyncio.sleep(0.05)
        assert not cancelled.done() and not waiting.done()  # one slot, held
        cancelled.cancel()
        slots.release(first, ok=False)  # failed: its env is closed, its slot freed
        second = await asyncio.wait_for(waiting, LIMIT_S)
        assert second is not first  # a fresh env
        again = asyncio.ensure_future(slots.acquire())
        slots.release(second, ok=True)  # went well: the env itself goes to the waiter
        assert await asyncio.wait_for(again, LIMIT_S) is second
        slots.release(second, ok=True)
        await slots.close()
        with pytest.raises(EnvStateError, match="ended"):  # no env is made after close
            await slots.acquire()
        host.close()

    asyncio.run(main())
