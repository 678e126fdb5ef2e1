"""T-PPO's truncated pool: responses extended by one window per step and continued from
their prefixes, refilled by whole groups, cut by the lag cap, multi-turn episodes carried
across steps, and a pool restored from its checkpoint state continuing as the original."""

from __future__ import annotations

import json

import pytest
from conftest import TINY_QWEN

from agentgym import load_config
from agentgym.generation import encode_prompt
from agentgym.trainers import TrainConfig
from agentgym.trainers.loop import DAPOTrainer


def _trainer(tmp_path, *extra: str, env: str = "agentgym-test/EvenChars-v0") -> DAPOTrainer:
    args = [
        f"run.output_dir={tmp_path}",
        "run.threads=1",
        "run.progress=false",
        "run.plots=false",
        "health.enabled=false",
        f"envs=[{{id: {env}}}]",
        f"model.preset_overrides={json.dumps(TINY_QWEN)}",
        "rollout.group_size=2",
        "rollout.batch_tasks=2",
        "rollout.max_tokens=10",
        "rollout.truncate_window=4",
        "algorithm.name=tppo",
        *extra,
    ]
    return DAPOTrainer(load_config(TrainConfig, None, args))


def _play(pool, steps: int, start: int = 0):
    """Advance the pool ``steps`` times (no training: the policy stays the same); return
    each step's merged record and the segments keyed by the episode they belong to."""
    by_episode: dict[tuple[int, int], dict[int, list]] = {}
    ended: dict[tuple[int, int], object] = {}
    records = []
    for version in range(start, start + steps):
        mine = pool.advance(version)
        tasks = list(pool.slots)  # before the exchange frees the ended slots
        done, _ = pool.exchange(mine)
        records.append(done)
        for seg in done.segments:
            task = tasks[seg.slot]
            by_episode.setdefault((task.group, task.sample), {}).setdefault(seg.turn, []).append(
                (version, seg)
            )
        for slot, ep in done.ended:
            ended[(tasks[slot].group, tasks[slot].sample)] = ep
    return records, by_episode, ended


def _untimed(ep) -> dict:
    d = ep.to_dict()
    d["metrics"] = {k: v for k, v in d["metrics"].items() if not k.startswith("time/")}
    return d


def test_responses_grow_by_one_window_and_continue_from_their_prefix(tmp_path, toy_envs_registered):
    t = _trainer(tmp_path)
    try:
        pool = t.steps.pool
        records, by_episode, ended = _play(pool, 5)
        assert len(pool.slots) == 4
        first = records[0]
        assert first.active == 4 and first.tokens <= 4 * 4
        for done in records:
            per_slot: dict[int, int] = {}
            for seg in done.segments:
                per_slot[seg.slot] = per_slot.get(seg.slot, 0) + len(seg.ids)
                assert len(seg.logprobs) == len(seg.ids)
            assert max(per_slot.values()) <= 4  # the window, whatever the turns
            assert done.tokens == sum(per_slot.values())
        assert ended, "no episode ended in 5 steps of 4 tokens with a 10-token cap"
        for key, ep in ended.items():
            (turn,) = ep.turns
            segs = by_episode[key][0]
            ids = [i for _, s in segs for i in s.ids]
            assert ids == list(turn.completion.token_ids)  # the pieces make the reply
            assert [lp for _, s in segs for lp in s.logprobs] == pytest.approx(
                list(turn.completion.logprobs)
            )
            prompt = tuple(encode_prompt(t.tokenizer, turn.messages))
            done_ids: tuple[int, ...] = ()
            for _, s in segs:  # each piece continues the prompt and the reply so far
                assert s.prompt_ids == prompt + done_ids
                done_ids += s.ids
            if len(ids) == 10:  # the cap: three windows, one per step
                assert [v for v, _ in segs] == [segs[0][0], segs[0][0] + 1, segs[0][0] + 2]
            assert ep.metrics["tppo/lags"] == [segs[-1][0] - segs[0][0]]
        # refill: slots freed by a whole group ended take the next task's group
        assert pool.next_group > 2
    finally:
        t.close()


def test_the_lag_cap_ends_a_response_that_spans_too_many_updates(tmp_path, toy_envs_registered):
    t = _trainer(tmp_path, "rollout.max_tokens=64", "rollout.max_policy_lag=1")
    try:
        records, by_episode, ended = _play(t.steps.pool, 3)
        assert sum(r.lag_cuts for r in records) >= 1
        assert all(lag <= 1 for r in records for lag in r.lags)
        cut = [ep for ep in ended.values() if ep.turns[0].completion.num_tokens == 8]
        assert cut, "no response ran two full windows unended"
        assert all(ep.turns[0].completion.finish_reason == "length" for ep in cut)
    finally:
        t.close()


def test_a_multi_turn_episode_carries_its_turns_across_steps(tmp_path, toy_envs_registered):
    t = _trainer(
        tmp_path,
        "rollout.max_tokens=6",
        "rollout.truncate_window=4",
        env="agentgym-test/TwoPart-v0",
    )
    try:
        _, by_episode, ended = _play(t.steps.pool, 8)
        assert ended
        for key, ep in ended.items():
            assert len(ep.turns) >= 2
            for k, turn in enumerate(ep.turns):
                segs = by_episode[key].get(k, [])
                assert [i for _, s in segs for i in s.ids] == list(turn.completion.token_ids)
        # a later turn began in the step its previous turn ended (with the budget left)
        starts = [
            (segs[k][-1][0], segs[k + 1][0][0])
            for segs in by_episode.values()
            for k in range(len(segs) - 1)
            if k in segs and k + 1 in segs
        ]
        assert any(a == b for a, b in starts)
    finally:
        t.close()


def test_a_restored_pool_continues_as_the_original(tmp_path, toy_envs_registered):
    a = _trainer(tmp_path / "a")
    b = _trainer(tmp_path / "b")
    try:
        _play(a.steps.pool, 2)
        state = json.loads(json.dumps(a.steps.pool.state_dict()))  # what a checkpoint holds
        assert any(s is not None and s["turns"] for s in state["slots"])  # replies in flight
        b.rollouts.load_state_dict(a.rollouts.state_dict())
        b.steps.pool.load_state_dict(state)
        got, _, got_ended = _play(b.steps.pool, 3, start=2)
        want, _, want_ended = _play(a.steps.pool, 3, start=2)
        for g, w in zip(got, want, strict=True):
            assert g.segments == w.segments
            assert g.lags == w.lags and g.tokens == w.tokens
        assert got_ended.keys() == want_ended.keys()
        for k in want_ended:
            assert _untimed(got_ended[k]) == _untimed(want_ended[k])
    finally:
        a.close()
        b.close()


def test_the_episode_deadline_counts_env_calls_not_the_waits_between_steps(
    tmp_path, toy_envs_registered
):
    """``rollout.episode_timeout_s`` under T-PPO: a turn waits for the pool across steps
    (here 1.3 s between steps, over a 1 s deadline) and its episode still ends well, while
    an env step that hangs past the deadline fails the episode as ``episode_timeout``."""
    import time

    t = _trainer(tmp_path / "wait", "rollout.episode_timeout_s=1")
    try:
        pool, ended = t.steps.pool, {}
        for version in range(4):
            done, _ = pool.exchange(pool.advance(version))
            ended.update(dict(done.ended))
            time.sleep(1.3)  # the trainer's update, with the pool's event loop stopped
        assert ended and not [ep.failure for ep in ended.values() if ep.failed]
    finally:
        t.close()
    hung = "agentgym-test/EvenChars-v0, kwargs: {hang_s: 3}"
    t = _trainer(
        tmp_path / "hang", "rollout.episode_timeout_s=1", "rollout.episode_retries=0", env=hung
    )
    try:
        pool, ended = t.steps.pool, {}
        for version in range(4):
            done, _ = pool.exchange(pool.advance(version))
            ended.update(dict(done.ended))
        assert ended
        for ep in ended.values():
            assert ep.failed and ep.failure.reason == "episode_timeout"
            assert "stuck in step" in ep.failure.message
    finally:
        t.close()
