"""rollout: concurrency, groups, JSONL streaming, callbacks, seeds."""

from __future__ import annotations

import asyncio

import pytest
from toy_envs import CounterEnv

from agentgym import InfraError, LocalEnvs, UnknownNameError
from agentgym.errors import EnvStateError
from agentgym.policies import OraclePolicy, ScriptedPolicy
from agentgym.rollouts import derive_seed, rollout, rollout_async
from agentgym.types import Completion, SamplingParams, read_episodes


def test_episodes_really_overlap_in_time():
    async def slow(messages):
        await asyncio.sleep(0.2)
        return "done"

    eps = rollout(lambda: CounterEnv(), ScriptedPolicy(slow), num_tasks=4, concurrency=4)
    starts = [e.metrics["time/start"] for e in eps]
    ends = [e.metrics["time/end"] for e in eps]
    # every episode started before any episode ended: all four were in flight together
    assert max(starts) < min(ends)


def test_groups_are_ordered_by_task_then_sample_and_share_the_task():
    eps = rollout(
        lambda: CounterEnv(target=3),
        OraclePolicy(),
        seeds=[10, 11, 12],
        group_size=3,
        concurrency=5,
    )
    assert [(e.seed, e.sample) for e in eps] == [(s, k) for s in (10, 11, 12) for k in range(3)]
    for i in range(0, 9, 3):
        assert len({e.task_id for e in eps[i : i + 3]}) == 1
    assert all(e.reward == 1.0 and e.terminated for e in eps)


def test_turns_record_prompts_completions_kinds_and_conversations():
    env_fn = lambda: CounterEnv(target=4, memory={"every_k_turns": 2})  # noqa: E731
    (ep,) = rollout(env_fn, OraclePolicy(), seeds=[0])
    kinds = [t.kind for t in ep.turns]
    assert "summary" in kinds
    assert ep.num_conversations >= 2
    first_summary = kinds.index("summary")
    assert ep.turns[first_summary + 1].conversation == ep.turns[first_summary].conversation + 1
    assert ep.turns[0].messages[-1].content.startswith("Count to 4.")


def test_jsonl_out_and_callback_see_each_episode(tmp_path):
    seen = []
    out = tmp_path / "eps.jsonl"
    eps = rollout(
        lambda: CounterEnv(), OraclePolicy(), num_tasks=5, out=out, on_episode=seen.append
    )
    assert sorted(e.seed for e in seen) == [0, 1, 2, 3, 4]
    assert sorted(e.seed for e in read_episodes(out)) == [e.seed for e in eps]


def test_seeded_sampling_gives_each_request_a_distinct_reproducible_seed():
    seeds = []

    def record(messages, sampling):
        seeds.append(sampling.seed)
        return Completion(text="done", num_tokens=1)

    rollout(
        lambda: CounterEnv(),
        ScriptedPolicy(record),
        seeds=[1, 2],
        group_size=2,
        sampling=SamplingParams(seed=7),
        concurrency=1,
    )
    assert len(set(seeds)) == 4
    assert seeds[0] == derive_seed(7, 1, 0, 0)


def test_env_without_end_is_stopped_with_a_clear_error():
    endless = (lambda: CounterEnv(), ScriptedPolicy(lambda m: "next"))
    (ep,) = rollout(*endless, num_tasks=1, max_steps=5)
    assert ep.failed and ep.failure.reason == "env_error" and ep.failure.where == "step"
    assert "did not end within 5 steps" in ep.failure.message
    with pytest.raises(EnvStateError, match="did not end within 5 steps"):
        rollout(*endless, num_tasks=1, max_steps=5, on_failure="raise")


def test_rollout_inside_a_running_loop_points_to_the_async_version():
    async def inner():
        with pytest.raises(EnvStateError, match="rollout_async"):
            rollout(lambda: CounterEnv(), OraclePolicy())
        return await rollout_async(lambda: CounterEnv(), OraclePolicy(), num_tasks=2)

    assert len(asyncio.run(inner())) == 2


def test_kept_envs_are_reused_across_rollouts_with_the_same_episodes():
    made, closed = [], []

    class Tracked(CounterEnv):
        def close(self):
            closed.append(self)
            super().close()

    def make():
        made.append(Tracked(target=3, memory={"every_k_turns": 2}))
        return made[-1]

    fresh = rollout(make, OraclePolicy(), seeds=[4, 5], group_size=2, concurrency=3)
    assert len(made) == 3 and len(closed) == 3  # without a cache every env is closed
    made.clear()
    closed.clear()
    cache = LocalEnvs(keep=True)
    first = rollout(make, OraclePolicy(), seeds=[4, 5], group_size=2, concurrency=3, env_host=cache)
    again = rollout(make, OraclePolicy(), seeds=[4, 5], group_size=2, concurrency=3, env_host=cache)
    assert len(made) == 3 and not closed and len(cache) == 3  # made once, then reused
    for eps in (first, again):
        assert [e.to_json() for e in _without_times(eps)] == [
            e.to_json() for e in _without_times(fresh)
        ]
    # another configuration gets envs of its own
    other = rollout(lambda: CounterEnv(target=9), OraclePolicy(), seeds=[1], env_host=cache)
    assert other[0].reward == 1.0 and len(cache) == 4
    cache.close()
    assert len(closed) == 3 and len(cache) == 0


def test_an_env_whose_episode_failed_is_never_kept():
    closed = []

    class Fragile(CounterEnv):
        def _act(self, action):
            if action == "boom":
                raise RuntimeError("env broke")
            return super()._act(action)

        def close(self):
            closed.append(self)

    cache = LocalEnvs(keep=True)
    (ep,) = rollout(Fragile, ScriptedPolicy(lambda m: "boom"), seeds=[0], env_host=cache)
    assert ep.failed and ep.failure.reason == "env_error" and "env broke" in ep.failure.message
    assert len(cache) == 0 and len(closed) == 1
    with pytest.raises(RuntimeError, match="env broke"):
        rollout(
            Fragile, ScriptedPolicy(lambda m: "boom"), seeds=[0], env_host=cache, on_failure="raise"
        )
    assert len(cache) == 0 and len(closed) == 2


def test_an_env_still_in_an_episode_when_the_rollout_fails_is_not_kept():
    import time

    from agentgym import ConfigError

    closed = []

    class Fragile(CounterEnv):
        def _begin(self, seed, options):
            self.bad = seed == 0
            return super()._begin(seed, options)

        def _act(self, action):
            if self.bad:  # a configuration problem ends the whole rollout at once
                raise ConfigError("env broke")
            time.sleep(0.3)  # the other episode is still stepping when this one fails
            return super()._act(action)

        def close(self):
            closed.append(self)

    cache = LocalEnvs(keep=True)
    with pytest.raises(ConfigError, match="env broke"):
        rollout(
            Fragile, ScriptedPolicy(lambda m: "next"), seeds=[0, 1], concurrency=2, env_host=cache
        )
    assert len(cache) == 0  # one env broke, the other was mid-episode: neither is kept
    assert len(closed) == 2


def _without_times(eps):
    from dataclasses import replace

    return [
        replace(e, metrics={k: v for k, v in e.metrics.items() if not k.startswith("time/")})
        for e in eps
    ]


def test_local_envs_checks_its_threads_and_closes_twice():
    from agentgym import ConfigError

    with pytest.raises(ConfigError, match="threads"):
        LocalEnvs(threads=0)
    host = LocalEnvs(threads=2, keep=True)
    rollout(lambda: CounterEnv(target=2), OraclePolicy(), seeds=[0, 1, 2], env_host=host)
    assert host.threads == 2 and 1 <= len(host) <= 3  # the envs were kept, not closed
    host.close()
    host.close()
    assert len(host) == 0


def test_one_failing_episode_of_sixteen_keeps_the_other_fifteen(tmp_path):
    """The issue's case: an env that raises in 1 of 16 episodes loses nothing else."""

    class FlakyOnSeven(CounterEnv):
        def _begin(self, seed, options):
            self.flaky = seed == 7
            return super()._begin(seed, options)

        def _act(self, action):
            if self.flaky:
                raise InfraError("the grader's worker died", reason="grader_crashed")
            return super()._act(action)

    out = tmp_path / "eps.jsonl"
    eps = rollout(
        lambda: FlakyOnSeven(target=2), OraclePolicy(), seeds=range(16), concurrency=4, out=out
    )
    assert len(eps) == 16 and [e.seed for e in eps] == list(range(16))
    failed = [e for e in eps if e.failed]
    assert [e.seed for e in failed] == [7]
    assert failed[0].failure.reason == "grader_crashed" and failed[0].failure.where == "step"
    assert failed[0].turns  # how far it got is kept
    assert all(e.reward == 1.0 for e in eps if not e.failed)
    on_disk = read_episodes(out)  # every episode is written, the failure with its record
    assert len(on_disk) == 16 and sum(e.failed for e in on_disk) == 1
    assert next(e for e in on_disk if e.failed).failure == failed[0].failure


def test_a_failed_episode_is_retried_on_a_fresh_env_and_can_recover():
    attempts = []

    class FailsOnce(CounterEnv):
        def _act(self, action):
            attempts.append(self)
            if len(attempts) == 1:
                raise InfraError("container died", reason="sandbox_died")
            return super()._act(action)

    (ep,) = rollout(lambda: FailsOnce(target=1), OraclePolicy(), seeds=[3], retries=2)
    assert not ep.failed and ep.reward == 1.0
    assert ep.metrics["rollout/failed_attempts"] == ["sandbox_died"]
    assert len({id(a) for a in attempts}) == 2  # the retry ran on another env instance
    (again,) = rollout(lambda: FailsOnce(target=1), OraclePolicy(), seeds=[3], retries=0)
    assert not again.failed  # (attempts already counted one failure)


def test_a_policy_that_raises_fails_its_episode_and_a_config_error_raises():
    async def broken(messages, sampling):
        raise ConnectionError("endpoint went away")

    (ep,) = rollout(lambda: CounterEnv(target=2), broken, seeds=[0])
    assert ep.failure.reason == "policy_error" and ep.failure.where == "policy"
    assert "endpoint went away" in ep.failure.message
    with pytest.raises(UnknownNameError):
        rollout("agentgym/NoSuchEnv-v0", OraclePolicy(), seeds=[0])
