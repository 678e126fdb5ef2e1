"""MemoryRecall-v0: solvable only by carrying facts through memory summaries."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentgym  # noqa: F401
from agentgym.envs.memory_recall import parse_answers
from agentgym.errors import ConfigError
from agentgym.policies import OraclePolicy, ScriptedPolicy
from agentgym.rollouts import rollout


def test_oracle_scores_one_and_every_episode_spans_several_conversations():
    eps = rollout("agentgym/MemoryRecall-v0", OraclePolicy(), num_tasks=6)
    assert [e.reward for e in eps] == [1.0] * 6
    assert min(e.num_conversations for e in eps) >= 2
    assert all(any(t.kind == "summary" for t in e.turns) for e in eps)


def test_an_agent_that_writes_empty_summaries_forgets_early_facts():
    env_id = "agentgym/MemoryRecall-v0"

    def forgetful(messages):
        # like the oracle on act turns, but its summaries keep nothing
        if "Write a summary" in messages[-1].content:
            return "nothing to remember"
        return oracle_like(messages)

    bound = {}

    def oracle_like(messages):
        return bound["env"].unwrapped.oracle_action(list(messages))

    class Forgetful:
        def for_env(self, env):
            bound["env"] = env
            return ScriptedPolicy(forgetful)

    eps = rollout(env_id, Forgetful(), num_tasks=6, concurrency=1)
    assert sum(e.reward for e in eps) / len(eps) < 0.5


def test_without_memory_the_whole_document_stays_in_one_conversation():
    eps = rollout(
        "agentgym/MemoryRecall-v0", OraclePolicy(), num_tasks=2, env_kwargs={"memory": False}
    )
    assert [e.num_conversations for e in eps] == [1, 1]
    assert [e.reward for e in eps] == [1.0, 1.0]


def test_difficulty_knobs_change_the_document():
    env = gym.make(
        "agentgym/MemoryRecall-v0",
        num_facts=2,
        num_distractors=20,
        chunk_size=3,
        memory={"token_budget": 300, "summary_max_tokens": 40},
    )
    env.reset(seed=0)
    base = env.unwrapped
    assert base.num_parts == 8
    assert len(base._asked) == 2


def test_config_where_memory_is_never_needed_is_rejected():
    with pytest.raises(ConfigError, match="fits in the per-conversation budget"):
        gym.make(
            "agentgym/MemoryRecall-v0",
            num_facts=1,
            num_distractors=0,
            memory={"token_budget": 4000, "summary_max_tokens": 64},
        )


def test_answers_are_parsed_strictly():
    asked = [101, 202, 303]
    text = "locker 101: 1234\nLocker 202 = 0042\nlocker 303: 1111\nlocker 303: 2222"
    assert parse_answers(text, asked) == {101: "1234", 202: "0042", 303: None}
    assert parse_answers("", asked) == {101: None, 202: None, 303: None}


def test_listing_many_codes_for_one_locker_earns_nothing():
    env = gym.make("agentgym/MemoryRecall-v0", memory=False)
    obs, info = env.reset(seed=3)
    base = env.unwrapped
    for _ in range(base.num_parts):
        _obs, *_ = env.step("ok")
    guesses = "\n".join(f"locker {k}: {c:04d}" for k in base._asked for c in range(0, 10000, 1000))
    *_, info = env.step(guesses)
    assert info["reward_breakdown"]["correct"] == 0


DEMO_KWARGS = {
    "num_facts": 1,
    "num_distractors": 2,
    "chunk_size": 1,
    "memory": {
        "token_budget": 160,
        "summary_max_tokens": 20,
        "reserve_tokens": 8,
        "every_k_turns": 1,
        "summary_prompt": "Context full: write your summary.",
        "resume_template": "{task}\n\n## Memory\n{memory}{digest}",
    },
}


def test_a_lossy_oracle_drops_codes_from_summaries_and_leaves_the_tasks_alone():
    seeds = range(300)
    exact = rollout("agentgym/MemoryRecall-v0", OraclePolicy(), seeds=seeds, env_kwargs=DEMO_KWARGS)
    lossy = rollout(
        "agentgym/MemoryRecall-v0",
        OraclePolicy(),
        seeds=seeds,
        env_kwargs={**DEMO_KWARGS, "oracle_forget": 0.2},
    )
    assert [e.reward for e in exact] == [1.0] * len(seeds)
    # three summaries each keep the code with probability 0.8: about 0.8^3 = 0.51 recall
    assert 0.42 < sum(e.reward for e in lossy) / len(lossy) < 0.60
    # the same tasks: the first prompt of every episode is unchanged
    assert [e.turns[0].messages for e in lossy] == [e.turns[0].messages for e in exact]
    forgot = [e for e in lossy if e.reward == 0]
    # an episode fails exactly where a summary left the code out; act turns never do
    for e in forgot:
        summaries = [t.completion.text for t in e.turns if t.kind == "summary"]
        assert "No asked codes seen yet." in summaries
    # the draw is fixed by the seed and the conversation: the same again
    again = rollout(
        "agentgym/MemoryRecall-v0",
        OraclePolicy(),
        seeds=seeds,
        env_kwargs={**DEMO_KWARGS, "oracle_forget": 0.2},
    )
    assert [e.reward for e in again] == [e.reward for e in lossy]


def test_oracle_forget_out_of_range_is_rejected():
    with pytest.raises(ConfigError, match="oracle_forget"):
        gym.make("agentgym/MemoryRecall-v0", oracle_forget=1.5)


def test_too_few_conversations_cut_the_episode_off_before_its_answer():
    from agentgym import (
        approx_tokens,
        episode_overlong,
        episode_tokens,
        summary_tokens,
        working_context,
    )

    kwargs = {**DEMO_KWARGS, "memory": {**DEMO_KWARGS["memory"], "max_conversations": 3}}
    short = rollout("agentgym/MemoryRecall-v0", OraclePolicy(), seeds=range(4), env_kwargs=kwargs)
    full = rollout(
        "agentgym/MemoryRecall-v0", OraclePolicy(), seeds=range(4), env_kwargs=DEMO_KWARGS
    )
    assert [e.reward for e in short] == [0.0] * 4 and all(map(episode_overlong, short))
    assert [e.reward for e in full] == [1.0] * 4 and not any(map(episode_overlong, full))
    assert {e.reward_breakdown["end_reason"] for e in short} == {"max_conversations"}
    # the working context is each episode's largest prompt: memory summaries keep it at
    # about the budget, where one conversation holding the whole document grows past it
    whole = rollout(
        "agentgym/MemoryRecall-v0",
        OraclePolicy(),
        seeds=range(4),
        env_kwargs={**DEMO_KWARGS, "memory": False},
    )
    for e, one in zip(full, whole, strict=True):
        assert 100 < working_context(e) < working_context(one)
        assert summary_tokens(e) == sum(
            approx_tokens(t.completion.text) for t in e.turns if t.kind == "summary"
        )
        assert 0 < summary_tokens(e) < episode_tokens(e) and summary_tokens(one) == 0


def test_the_brief_style_shortens_every_conversation_and_keeps_the_task():
    memory = {**DEMO_KWARGS["memory"], "token_budget": 200}
    kwargs = {**DEMO_KWARGS, "num_distractors": 5, "chunk_size": 2, "memory": memory}
    brief_kwargs = {
        **kwargs,
        "prompt_style": "brief",
        "memory": {**memory, "token_budget": 80},
    }
    seeds = range(20)
    full = rollout("agentgym/MemoryRecall-v0", OraclePolicy(), seeds=seeds, env_kwargs=kwargs)
    brief = rollout(
        "agentgym/MemoryRecall-v0", OraclePolicy(), seeds=seeds, env_kwargs=brief_kwargs
    )
    assert [e.reward for e in brief] == [1.0] * len(seeds)
    assert [e.num_conversations for e in brief] == [e.num_conversations for e in full]
    # the same document: every code of the full text appears in the brief one
    for f, b in zip(full, brief, strict=True):
        assert b.turns[0].messages[0].role == "user"  # no system prompt
        expected = f.reward_breakdown["expected"]
        assert expected == b.reward_breakdown["expected"]
        locker, code = next(iter(expected.items()))
        seen = " ".join(m.content for t in b.turns for m in t.messages if m.role == "user")
        assert f"locker {locker}: {code}" in seen
    chars = [sum(len(m.content) for m in t.messages) for e in full for t in e.turns]
    brief_chars = [sum(len(m.content) for m in t.messages) for e in brief for t in e.turns]
    assert sum(brief_chars) < 0.5 * sum(chars)


def test_an_unknown_prompt_style_is_rejected():
    with pytest.raises(ConfigError, match="prompt_style"):
        gym.make("agentgym/MemoryRecall-v0", prompt_style="terse")


LONG = {
    "num_facts": 2,
    "num_distractors": 2,
    "chunk_size": 1,
    "early_fraction": 1.0,
    "prompt_style": "brief",
}


def test_a_context_window_cuts_the_long_context_and_keeps_the_task_line():
    from agentgym import count_message_tokens, working_context

    seeds = range(8)
    whole = rollout(
        "agentgym/MemoryRecall-v0",
        OraclePolicy(),
        seeds=seeds,
        env_kwargs={**LONG, "memory": False},
    )
    cut = rollout(
        "agentgym/MemoryRecall-v0",
        OraclePolicy(),
        seeds=seeds,
        env_kwargs={**LONG, "memory": False, "context_window": 70},
    )
    # the oracle's notes repeat the asked codes it has seen, so the last one is enough
    assert [e.reward for e in cut] == [e.reward for e in whole] == [1.0] * 8
    for w, c in zip(whole, cut, strict=True):
        assert working_context(c) <= 70 < working_context(w)
        assert c.num_conversations == 1 and len(c.turns) == len(w.turns)
        task = w.turns[0].messages[-1].content.split("\n\n")[0]
        for turn in c.turns:
            prompt = [m for m in turn.messages if m.role != "system"]
            assert count_message_tokens(turn.messages) <= 70
            assert prompt[0].content.startswith(task) and prompt[-1].role == "user"
            roles = [m.role for m in prompt]
            assert roles == ["user", *["assistant", "user"] * ((len(roles) - 1) // 2)]
        # the question turn no longer shows part 1, which it did in the whole context
        first_part = w.turns[0].messages[-1].content.split("\n\n")[1]
        assert first_part in str(w.turns[-1].messages) and first_part not in str(
            c.turns[-1].messages
        )


def test_a_window_too_small_for_the_last_reply_joins_the_latest_part_to_the_task_line():
    env = gym.make("agentgym/MemoryRecall-v0", **LONG, memory=False, context_window=60)
    obs, _ = env.reset(seed=0)
    for _ in range(2):
        obs, *_ = env.step("a very long reply " * 20)
    assert len(obs) == 1 and obs[0].role == "user"
    task, part = obs[0].content.split("\n\n")
    assert task == env.unwrapped.task.prompt and part.startswith("Part 3/")


def test_a_context_window_needs_the_long_context_and_room_for_a_part():
    with pytest.raises(ConfigError, match="needs memory: false"):
        gym.make("agentgym/MemoryRecall-v0", context_window=200)
    with pytest.raises(ConfigError, match="raise it to at least"):
        gym.make("agentgym/MemoryRecall-v0", memory=False, context_window=20)
