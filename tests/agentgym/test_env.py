"""The ConversationEnv contract and memory-summary turns, on a toy counting env."""

from __future__ import annotations

import pytest
from toy_envs import CounterEnv

from agentgym.errors import ConfigError, EnvStateError, UnknownNameError
from agentgym.memory import MemoryConfig
from agentgym.tokens import approx_tokens, count_message_tokens, truncate_to_tokens


def play(env, actions):
    out = []
    for a in actions:
        out.append(env.step(a))
        if out[-1][2] or out[-1][3]:
            break
    return out


def test_reward_is_zero_until_the_terminal_step_which_carries_the_breakdown():
    env = CounterEnv(target=2)
    obs, info = env.reset(seed=0)
    assert info == {"conversation": 0, "turn_kind": "act", "turn": 0, "task_id": env.task.task_id}
    start = env.counter
    steps = play(env, ["next", "next", "done"])
    assert [s[1] for s in steps[:-1]] == [0.0, 0.0]
    _obs, reward, terminated, truncated, info = steps[-1]
    assert terminated and not truncated
    assert reward == min(1.0, (start + 2) / 2)
    assert info["reward_breakdown"]["counter"] == start + 2
    assert info["reward_breakdown"]["end_reason"] == "done"
    assert info["reward_breakdown"]["turns"] == 3


def test_malformed_action_is_feedback_not_a_crash():
    env = CounterEnv()
    env.reset(seed=0)
    obs, _reward, terminated, truncated, _info = env.step("¿qué? 🙂")
    assert not (terminated or truncated)
    assert obs[-1].role == "user" and "unknown action" in obs[-1].content
    assert obs[-2].content == "¿qué? 🙂"


def test_state_errors_say_what_to_do():
    env = CounterEnv()
    with pytest.raises(EnvStateError, match="reset"):
        env.step("next")
    env.reset(seed=0)
    with pytest.raises(EnvStateError, match=r"completion\.text"):
        env.step(123)
    play(env, ["done"])
    with pytest.raises(EnvStateError, match="reset"):
        env.step("next")


def test_turn_and_token_limits_truncate_and_score():
    env = CounterEnv(max_turns=2)
    env.reset(seed=0)
    *_, (_obs, _reward, terminated, truncated, info) = play(env, ["next", "next", "next"])
    assert truncated and not terminated
    assert info["reward_breakdown"]["end_reason"] == "max_turns"

    env = CounterEnv(max_total_tokens=5)
    env.reset(seed=0)
    *_, last = play(env, ["next next next next next next"] * 3)
    assert last[3] and last[4]["reward_breakdown"]["end_reason"] == "max_total_tokens"


def test_summary_after_every_k_turns_starts_a_new_conversation_with_memory_and_digest():
    env = CounterEnv(target=10, memory={"every_k_turns": 2, "token_budget": 1000})
    obs, info = env.reset(seed=1)
    play(env, ["next"])
    obs, _, _, _, info = env.step("next")
    assert info["turn_kind"] == "summary" and info["conversation"] == 0
    # the turn rule, not the budget, ended this context: the agent is told so
    reason = "This context has reached its limit of 2 turns and will be cleared."
    assert obs[-1].content.endswith(env.memory.summary_prompt.replace("{reason}", reason))
    assert "context is full" not in obs[-1].content
    counter = env.counter
    obs, reward, terminated, truncated, info = env.step("my notes: counted twice")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info == {"conversation": 1, "turn_kind": "act", "turn": 2, "task_id": env.task.task_id}
    assert [m.role for m in obs] == ["system", "user"]
    assert "Count to 10." in obs[1].content
    assert "my notes: counted twice" in obs[1].content
    assert f"counter={counter}" in obs[1].content  # state digest
    assert env.counter == counter  # env state persists across conversations
    assert len(env.transcripts()) == 2
    assert env.transcripts()[0][-1].content == "my notes: counted twice"


def test_budget_trigger_fires_before_the_prompt_would_overflow():
    mem = MemoryConfig(enabled=True, token_budget=120, summary_max_tokens=20)
    env = CounterEnv(target=50, pad=10, memory=mem)
    obs, info = env.reset(seed=0)
    kinds = []
    for _ in range(30):
        before = info["turn_kind"]
        obs, *_, info = env.step("summary text" if before == "summary" else "next")
        kinds.append(before)
        if info["turn_kind"] == "summary":  # the budget ended it, and the agent is told so
            full = "Your context is full and will be cleared."
            assert obs[-1].content.endswith(mem.summary_prompt.replace("{reason}", full))
        # every act prompt fits the budget with room for the reply
        if info["turn_kind"] == "act":
            assert count_message_tokens(obs) + mem.reserve <= mem.token_budget
    assert "summary" in kinds
    assert env.conversation_index >= 2


def test_summary_is_capped_at_summary_max_tokens():
    env = CounterEnv(target=10, memory={"every_k_turns": 1, "summary_max_tokens": 8})
    env.reset(seed=0)
    env.step("next")
    long_summary = "word " * 200
    obs, *_ = env.step(long_summary)
    assert approx_tokens(env.memory_text) <= 8
    assert env.memory_text in obs[-1].content
    assert len(obs[-1].content) < len(long_summary)


def test_conversation_limit_truncates():
    env = CounterEnv(target=100, memory={"every_k_turns": 1, "max_conversations": 2})
    env.reset(seed=0)
    steps = play(env, ["next", "s1", "next", "s2", "next"])
    _obs, _reward, _terminated, truncated, info = steps[-1]
    assert truncated and info["reward_breakdown"]["end_reason"] == "max_conversations"
    assert info["reward_breakdown"]["conversations"] == 2


def test_same_seed_same_task_different_seed_may_differ():
    env = CounterEnv()
    env.reset(seed=5)
    a = env.counter
    env.reset(seed=5)
    assert env.counter == a
    assert len({(env.reset(seed=s), env.counter)[1] for s in range(20)}) > 1


def test_bad_memory_config_is_a_clear_error():
    with pytest.raises(ConfigError, match="summary_max_tokens"):
        MemoryConfig(enabled=True, token_budget=100, summary_max_tokens=100)
    with pytest.raises(UnknownNameError, match="Did you mean: 'token_budget'"):
        CounterEnv(memory={"token_budjet": 100})
    with pytest.raises(ConfigError, match="render_mode"):
        CounterEnv(render_mode="rgb_array")


def test_truncate_to_tokens_keeps_the_longest_prefix_within_the_bound():
    text = "alpha beta gamma delta epsilon " * 10
    cut = truncate_to_tokens(text, 10)
    assert approx_tokens(cut) <= 10 and text.startswith(cut)
    assert len(cut) >= 30
    assert truncate_to_tokens("short", 10) == "short"
    assert truncate_to_tokens("anything", 0) == ""


def test_render_ansi_returns_the_transcript():
    env = CounterEnv(render_mode="ansi")
    env.reset(seed=0)
    env.step("next")
    text = env.render()
    assert "conversation 0" in text and "[assistant]\nnext" in text


def test_tokenizer_counter_counts_like_encode_and_compares_by_tokenizer():
    from agentgym.generation import build_tokenizer
    from agentgym.tokens import counter_from_tokenizer

    tok = build_tokenizer()
    count = counter_from_tokenizer(tok)
    for text in ["", "What is 12 + 30?", "  spaces\n\nand é unicode ∑", "<|assistant|> 42"]:
        assert count(text) == len(tok.encode(text, add_special_tokens=False))
    assert count == counter_from_tokenizer(tok)  # equal configs: envs can be reused
    assert hash(count) == hash(counter_from_tokenizer(tok))
    assert count != counter_from_tokenizer(build_tokenizer())


def test_reward_breakdown_shares_no_container_with_the_env():
    from agentgym.env import _detached

    class Keeps(CounterEnv):
        def _begin(self, seed, options):
            self.history = {"counts": [1, 2], "meta": ({"k": 1},)}
            return super()._begin(seed, options)

        def _score(self, end_reason):
            return 1.0, {"history": self.history, "ratio": 0.5}

    env = Keeps()
    env.reset(seed=0)
    *_, info = env.step("done")
    got = info["reward_breakdown"]["history"]
    assert got == {"counts": [1, 2], "meta": ({"k": 1},)}
    got["counts"].append(3)
    got["meta"][0]["k"] = 2
    assert env.history == {"counts": [1, 2], "meta": ({"k": 1},)}
    obj = object()
    assert _detached({"a": [obj]})["a"][0] is not obj  # other objects are deep-copied
