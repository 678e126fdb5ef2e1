"""``agentgym/BalancedMath-v0``: the environment contract, rewards and options."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

import agentgym
from agentgym.checker import check_env
from agentgym.envs.math.env import CONTINUE_MESSAGE, BalancedMathEnv
from agentgym.envs.math.generator import generate
from agentgym.errors import ConfigError, EnvStateError, UnknownNameError
from agentgym.tokens import approx_tokens

ENV_ID = "agentgym/BalancedMath-v0"


def _make(**kwargs) -> BalancedMathEnv:
    return gym.make(ENV_ID, **kwargs).unwrapped


def _play_oracle(env: BalancedMathEnv, seed: int):
    obs, _ = env.reset(seed=seed)
    action = env.oracle_action(obs)
    _, reward, terminated, truncated, info = env.step(action)
    return action, reward, terminated, truncated, info


def test_registered_and_listed():
    assert ENV_ID in agentgym.agentgym_env_ids()
    assert isinstance(_make(), BalancedMathEnv)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"source": "hard", "answer_format": "answer_line"},
        {"memory": {"token_budget": 200, "summary_max_tokens": 40}, "token_cost": "linear"},
    ],
    ids=["default", "hard-answer-line", "memory"],
)
def test_passes_the_checker(kwargs):
    env = gym.make(ENV_ID, **kwargs)
    report = check_env(env, seed=3)
    assert "same seed + same actions -> same episode" in report.passed


def test_single_turn_oracle_gets_full_reward_and_a_complete_breakdown():
    env = _make()
    action, reward, terminated, truncated, info = _play_oracle(env, seed=11)
    assert (reward, terminated, truncated) == (1.0, True, False)
    b = info["reward_breakdown"]
    expected_keys = {
        "reward", "correct", "extracted", "gold", "format_ok", "answer_format", "found_format",
        "grade_reason", "grade_method", "response_tokens", "correctness_reward", "token_cost",
        "token_cost_applied", "token_penalty", "penalty_linear", "penalty_target",
        "penalty_overlong", "end_reason", "turns", "conversations", "policy_tokens",
    }  # fmt: skip
    assert expected_keys <= set(b)
    assert b["correct"] is True and b["format_ok"] is True
    assert b["gold"] == env.gold_answer and b["extracted"] == env.gold_answer
    assert b["response_tokens"] == approx_tokens(action)
    json.dumps(b)  # JSON-serialisable


def test_grading_time_is_an_episode_metric_not_info():
    env = _make()
    _, _, _, _, info = _play_oracle(env, seed=2)
    assert "grading_time_s" not in info["reward_breakdown"] and "grading_time_s" not in info
    assert env.episode_metrics["grading_time_s"] >= 0.0


@pytest.mark.parametrize(
    ("kwargs", "cost"),
    [
        ({"token_cost": "none"}, lambda n: 0.0),
        (
            {"token_cost": "linear", "linear_lambda": 0.5, "max_response_tokens": 200},
            lambda n: 0.5 * n / 200,
        ),
        (
            {"token_cost": "target", "target_tokens": 10, "target_alpha": 0.01},
            lambda n: 0.01 * abs(n - 10),
        ),
        (
            {"token_cost": "overlong", "max_response_tokens": 40, "overlong_cache": 30},
            lambda n: 0.0 if n <= 10 else (1.0 if n > 40 else (n - 10) / 30),
        ),
    ],
    ids=["none", "linear", "target", "overlong"],
)
def test_oracle_reward_is_correctness_minus_the_token_cost(kwargs, cost):
    env = _make(**kwargs)
    for seed in range(8):
        action, reward, *_ = _play_oracle(env, seed)
        assert reward == pytest.approx(1.0 - cost(approx_tokens(action))), (seed, action)


def test_eval_cli_oracle_mean_reward_is_correctness_minus_cost(capsys):
    from agentgym.cli import main

    code = main(
        [
            "eval", ENV_ID, "--policy", "oracle", "--episodes", "50", "--json",
            "--env-arg", "token_cost=linear", "--env-arg", "linear_lambda=0.5",
            "--seed", "0",  # eval's default seeds are the held-out split; compare seeds 0..49
        ]
    )  # fmt: skip
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    env = _make(token_cost="linear", linear_lambda=0.5)
    expected = []
    for seed in range(50):
        action, *_ = _play_oracle(env, seed)
        expected.append(1.0 - 0.5 * approx_tokens(action) / 1024)
    assert summary["episodes"] == 50
    assert summary["mean_reward"] == pytest.approx(sum(expected) / 50)


def test_rollout_copies_grading_time_into_episode_metrics():
    from agentgym.policies import make_policy
    from agentgym.rollouts import rollout

    episodes = rollout(ENV_ID, make_policy("oracle"), seeds=range(3))
    assert all(ep.reward == 1.0 for ep in episodes)
    assert all("grading_time_s" in ep.metrics for ep in episodes)
    assert all(ep.reward_breakdown["correct"] for ep in episodes)


def test_wrong_missing_and_misformatted_answers():
    env = _make(reward_scheme="signed")
    env.reset(seed=0)
    *_, info = env.step("I am not sure.")
    b = info["reward_breakdown"]
    assert (b["correct"], b["extracted"], b["grade_reason"], b["reward"]) == (
        False,
        None,
        "no_answer",
        -1.0,
    )

    env.reset(seed=0)
    _, reward, *_, info = env.step("\\boxed{not the answer}")
    assert reward == -1.0 and info["reward_breakdown"]["grade_reason"] == "mismatch"

    # right answer in the other format: graded, flagged, and rejected only when strict
    env.reset(seed=0)
    _, reward, *_, info = env.step(f"Answer: {env.gold_answer}")
    assert reward == 1.0 and info["reward_breakdown"]["format_ok"] is False
    strict = _make(strict_format=True)
    strict.reset(seed=0)
    _, reward, *_, info = strict.step(f"Answer: {strict.gold_answer}")
    assert reward == 0.0 and info["reward_breakdown"]["grade_reason"] == "wrong_format"
    # a boxed answer restated on a final Answer: line satisfies the answer_line format
    dapo = _make(strict_format=True, answer_format="answer_line")
    dapo.reset(seed=0)
    _, reward, *_, info = dapo.step(
        f"So \\boxed{{{dapo.gold_answer}}}.\nAnswer: {dapo.gold_answer}"
    )
    assert reward == 1.0 and info["reward_breakdown"]["format_ok"] is True


def test_seeding_kinds_levels_and_task_ids():
    env = _make(kinds="linear,quadratic", levels=[2])
    seen = set()
    for seed in range(20):
        _, info = env.reset(seed=seed)
        kind, level = info["task_id"].split("/")[1:3]
        assert kind in ("linear", "quadratic") and level == "2"
        seen.add(info["task_id"])
    assert len(seen) >= 15
    a, _ = env.reset(seed=5)
    b, _ = env.reset(seed=5)
    assert a == b
    # a task id replays that problem, whatever the seed
    p = generate(77, 3, "word")
    obs, info = env.reset(seed=1, options={"task_id": p.task_id})
    assert info["task_id"] == "gen/word/3/77" and p.problem in obs[-1].content
    assert env.worked_solution("verbose") == p.verbose_solution
    assert env.worked_solution("concise") == p.concise_solution


def test_prompts_and_answer_formats():
    env = _make(answer_format="answer_line", system_prompt="Be brief.")
    obs, _ = env.reset(seed=4)
    assert obs[0].role == "system" and obs[0].content == "Be brief."
    assert '"Answer: "' in obs[1].content
    assert env.oracle_action(obs).splitlines()[-1] == f"Answer: {env.gold_answer}"
    custom = _make(prompt_template="Q: {problem}\nA:")
    obs, _ = custom.reset(seed=4)
    assert obs[-1].content.startswith("Q: ") and obs[-1].content.endswith("\nA:")
    default = _make()
    obs, _ = default.reset(seed=4)
    assert "\\boxed{}" in obs[-1].content and len(obs) == 1


def test_custom_token_counter_drives_the_cost():
    def words(text: str) -> int:
        return len(text.split())

    env = _make(count_tokens=words, token_cost="linear", linear_lambda=1.0, max_response_tokens=100)
    action, reward, *_, info = _play_oracle(env, seed=9)
    assert info["reward_breakdown"]["response_tokens"] == words(action)
    assert reward == pytest.approx(1.0 - words(action) / 100)


def test_memory_mode_continues_until_an_answer_and_spans_conversations():
    env = _make(memory={"token_budget": 120, "summary_max_tokens": 30}, token_cost="linear")
    obs, info = env.reset(seed=6)
    gold = env.gold_answer
    thinking = "Let me think about this step by step. " * 6
    turns = 0
    while info["conversation"] == 0:
        if info["turn_kind"] == "summary":
            obs, reward, term, trunc, info = env.step("Summary: I restated the problem.")
        else:
            obs, reward, term, trunc, info = env.step(thinking)
            if info["turn_kind"] == "act":
                assert obs[-1].content == CONTINUE_MESSAGE
        assert (reward, term, trunc) == (0.0, False, False)
        turns += 1
        assert turns < 10
    assert "Summary: I restated the problem." in obs[-1].content
    obs, reward, term, trunc, info = env.step(f"Done: \\boxed{{{gold}}}")
    assert term and not trunc
    b = info["reward_breakdown"]
    assert b["correct"] and b["conversations"] == 2
    assert b["response_tokens"] == b["policy_tokens"] > approx_tokens(thinking)
    assert reward == pytest.approx(1.0 - 0.1 * b["response_tokens"] / 1024)


def test_memory_mode_truncates_without_an_answer():
    env = _make(memory=True, max_turns=3)
    env.reset(seed=1)
    for _ in range(2):
        _, _, term, trunc, _ = env.step("still thinking")
        assert not term and not trunc
    _, reward, term, trunc, info = env.step("still thinking")
    assert (term, trunc, reward) == (False, True, 0.0)
    assert info["reward_breakdown"]["end_reason"] == "max_turns"
    assert info["reward_breakdown"]["grade_reason"] == "no_answer"


def test_data_file_source(tmp_path: Path):
    path = tmp_path / "mine.jsonl"
    rows = [
        {"problem": "What is 2+3?", "answer": "5", "solution": "2+3 = \\boxed{5}"},
        {"problem": "What is 10/4?", "answer": "\\frac{5}{2}"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    env = _make(source=str(path), answer_format="answer_line")
    obs, info = env.reset(options={"index": 0})
    assert info["task_id"] == "mine/0" and "What is 2+3?" in obs[-1].content
    assert env.worked_solution() == "2+3 = 5\nAnswer: 5"
    _, info = env.reset(options={"task_id": "mine/1"})
    assert env.worked_solution("verbose") == "Answer: \\frac{5}{2}"
    _, reward, *_ = env.step("10/4 = 2.5\nAnswer: 2.5")
    assert reward == 1.0
    with pytest.raises(UnknownNameError, match="mine/1"):
        env.reset(options={"task_id": "mine/7"})
    with pytest.raises(ConfigError, match="index"):
        env.reset(options={"index": 5})


def test_hard_source_oracle_solves_every_problem():
    env = _make(source="hard")
    for index in range(len(env.items)):
        obs, _ = env.reset(options={"index": index})
        _, reward, *_, info = env.step(env.oracle_action(obs))
        assert reward == 1.0, (env.current.task_id, info["reward_breakdown"])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"kinds": "lineer"}, UnknownNameError, "linear"),
        ({"levels": "1,4"}, ConfigError, "levels"),
        ({"levels": []}, ConfigError, "at least one"),
        ({"answer_format": "latex"}, UnknownNameError, "boxed"),
        ({"prompt_template": "no placeholder"}, ConfigError, "{problem}"),
        ({"source": "/nonexistent/data.jsonl"}, ConfigError, "not found"),
        ({"source": "hard", "levels": [1]}, ConfigError, "generator"),
        ({"grading_timeout_s": 0}, ConfigError, "grading_timeout_s"),
        ({"hedging": "first"}, UnknownNameError, "hedging"),
        ({"token_cost": "target"}, ConfigError, "target_tokens"),
        ({"max_response_tokens": "many"}, ConfigError, "integer"),
        ({"system_prompt": 3}, ConfigError, "system_prompt"),
    ],
)
def test_bad_arguments_fail_at_make_time(kwargs, error, match):
    with pytest.raises(error, match=match):
        gym.make(ENV_ID, **kwargs)


def test_state_errors():
    env = BalancedMathEnv()
    with pytest.raises(EnvStateError):
        env.worked_solution()
    with pytest.raises(EnvStateError):
        env.step("x")
    env.reset(seed=0)
    with pytest.raises(UnknownNameError):
        env.reset(options={"bogus": 1})
    with pytest.raises(ConfigError, match="index"):
        env.reset(options={"index": 0})
