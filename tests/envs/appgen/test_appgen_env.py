"""AppGen-v0 end to end in real sandboxes: oracle, empty, partial, feedback, memory, config."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentgym
from agentgym.envs.appgen.env import AppGenEnv
from agentgym.envs.appgen.taskset import builtin_task_names, load_tasks
from agentgym.errors import ConfigError, UnknownNameError
from agentgym.policies import OraclePolicy, ScriptedPolicy
from agentgym.rollouts import rollout

from .conftest import sandbox_kwargs

ENV_ID = "agentgym/AppGen-v0"
NAMES = builtin_task_names()
#: the library tasks (no [app]): every backend grades them; full-stack tasks need Docker's
#: browser and are covered by test_fullstack.py
LIBRARY = [t.name for t in load_tasks() if t.app is None]


@pytest.fixture
def env(backend):
    e = gym.make(ENV_ID, **sandbox_kwargs(backend))
    yield e
    e.close()


def play(env, actor, seed=0, options=None):
    obs, info = env.reset(seed=seed, options=options)
    infos = [info]
    while True:
        obs, reward, terminated, truncated, info = env.step(actor(env, obs, info))
        infos.append(info)
        if terminated or truncated:
            return reward, info, infos, obs


def test_oracle_solves_every_library_task_over_two_conversations(backend):
    episodes = rollout(
        ENV_ID,
        OraclePolicy(),
        seeds=range(len(LIBRARY)),
        concurrency=4,
        env_kwargs={**sandbox_kwargs(backend), "tasks": LIBRARY},
    )
    assert sorted(e.reward_breakdown["task"] for e in episodes) == LIBRARY
    for ep in episodes:
        b = ep.reward_breakdown
        assert ep.reward == 1.0, (b["task"], b["errors"], b["per_test"])
        assert ep.terminated and b["end_reason"] == "done"
        assert ep.num_conversations >= 2 and b["conversations"] >= 2
        assert any(t.kind == "summary" for t in ep.turns)
        assert b["passed"] == b["total"] > 0 and not b["tampered"]
        assert b["sandbox"] == backend and b["grader_isolated"] is (backend == "docker")


def test_empty_submission_scores_zero(env, backend):
    reward, info, infos, _ = play(env, lambda e, o, i: "Done already.\n<submit/>", seed=3)
    b = info["reward_breakdown"]
    # every info names the backend, and the breakdown says whether grading was isolated
    assert {i["sandbox"] for i in infos} == {backend}
    assert (b["sandbox"], b["grader_isolated"]) == (backend, backend == "docker")
    assert reward == 0.0 and b["passed"] == 0 and b["total"] > 0
    assert b["turns"] == 1 and b["conversations"] == 1 and b["end_reason"] == "done"


def test_partial_solution_scores_strictly_between(env):
    base = env.unwrapped

    def actor(e, obs, info):
        if info["turn_kind"] == "summary":
            return "Wrote part of the package."
        app = base.app_task
        written = base._oracle_state.setdefault("partial", 0)
        if written >= 2:
            return "<submit/>"
        base._oracle_state["partial"] += 1
        path = app.oracle_order[written]
        return f'<write path="{path}">\n{app.solution[path].decode()}</write>'

    reward, info, _, _ = play(env, actor, options={"task": "rate_limiter"})
    b = info["reward_breakdown"]
    assert 0.0 < reward < 1.0
    assert reward == b["passed"] / b["total"]


def test_feedback_reports_each_action_and_the_file_tree(env):
    obs, info = env.reset(options={"task": "csv_report"})
    assert "# Task: CSV report generator" in obs[-1].content
    assert "csvreport/reader.py" in obs[-1].content
    reply = (
        '<write path="notes/plan.txt">\nstep one\n</write>\n'
        '<read path="notes/plan.txt"/>\n'
        '<read path="nope.py"/>\n'
        "<run>echo hello; echo oops >&2; exit 3</run>\n"
        '<write path="../escape.py">x</write>\n'
        '<delete path="notes/plan.txt"/>\n'
        '<bogus/> <frobnicate path="x"/>'
    )
    obs, reward, terminated, truncated, info = env.step(reply)
    text = obs[-1].content
    assert reward == 0.0 and not terminated and not truncated
    assert "[1] write notes/plan.txt: ok, 9 bytes" in text
    assert "[2] read notes/plan.txt (9 bytes):\nstep one" in text
    assert "[3] read nope.py: error: no such file" in text
    assert "exit code 3" in text and "hello" in text and "oops" in text
    assert "[5] error:" in text and ".." in text
    assert "[6] delete notes/plan.txt: ok" in text
    assert "unknown action <frobnicate>" in text
    files = text.split("## Files", 1)[1]
    assert "csvreport/reader.py (" in files and "notes/plan.txt" not in files
    assert "Turn 1 of 30 done." in text


def test_a_reply_without_actions_is_feedback_not_a_crash(env):
    env.reset(options={"task": "kv_wal"})
    obs, reward, terminated, truncated, info = env.step("Hmm, let me think about the design.")
    assert "contained no action" in obs[-1].content
    assert not terminated and not truncated and reward == 0.0


def test_long_output_is_cut_in_the_middle(env):
    env.reset(options={"task": "kv_wal"})
    obs, *_ = env.step("<run>python3 -c \"print('A' * 20000 + 'END')\"</run>")
    text = obs[-1].content
    assert "characters omitted" in text and "END" in text
    assert len(text) < 8000


def test_files_persist_across_conversations_and_digest_shows_them(backend):
    env = gym.make(ENV_ID, **sandbox_kwargs(backend), memory={"every_k_turns": 1})
    try:
        env.reset(options={"task": "log_analyzer"})
        obs, *_, info = env.step('<write path="logstats/keep.py">\nX = 42\n</write>')
        assert info["turn_kind"] == "summary"
        obs, *_, info = env.step("I wrote logstats/keep.py with X = 42.")
        assert info["conversation"] == 1 and info["turn_kind"] == "act"
        first = obs[-1].content
        assert "I wrote logstats/keep.py" in first
        assert "logstats/keep.py (7 bytes)" in first
        assert "# Task: Web server access log analyzer" in first
        obs, *_ = env.step('<read path="logstats/keep.py"/>')
        assert "X = 42" in obs[-1].content
    finally:
        env.close()


def test_turn_limit_truncates_and_grades(backend):
    env = gym.make(ENV_ID, **sandbox_kwargs(backend), max_turns=2, tasks=["rate_limiter"])
    try:
        reward, info, _, _ = play(env, lambda e, o, i: "<run>true</run>")
        b = info["reward_breakdown"]
        assert info["turn"] == 2 and b["end_reason"] == "max_turns" and reward == 0.0
        assert b["total"] == 10 and set(b["per_test"].values()) <= {"failed", "error", "not run"}
    finally:
        env.close()


def test_task_choice_by_seed_and_option(env):
    assert env.reset(seed=0)[1]["task_id"].startswith(NAMES[0] + "@")
    assert env.reset(seed=len(NAMES) + 1)[1]["task_id"].startswith(NAMES[1] + "@")
    assert env.reset(options={"task": "kv_wal"})[1]["task_id"].startswith("kv_wal@")
    with pytest.raises(UnknownNameError):
        env.reset(options={"task": "kv_wall"})


def test_bonus_and_token_cost(backend):
    env = gym.make(
        ENV_ID,
        **sandbox_kwargs(backend),
        tasks=["log_analyzer"],
        completion_bonus=0.5,
        token_cost=0.01,
    )
    try:
        policy_actor = lambda e, o, i: e.unwrapped.oracle_action(o)  # noqa: E731
        reward, info, _, _ = play(env, policy_actor)
        b = info["reward_breakdown"]
        assert b["pass_rate"] == 1.0 and b["bonus"] == 0.5
        assert b["token_penalty"] == pytest.approx(0.01 * b["policy_tokens"] / 1000)
        assert reward == pytest.approx(1.5 - b["token_penalty"])
    finally:
        env.close()


def test_same_actions_same_info(backend):
    """Timings stay out of info; two plays of the same actions give identical infos."""
    env = gym.make(ENV_ID, **sandbox_kwargs(backend), tasks=["log_analyzer"])
    try:
        actions = []

        def record(e, o, i):
            a = e.unwrapped.oracle_action(o)
            actions.append(a)
            return a

        _, info1, infos1, obs1 = play(env, record)
        replay = iter(list(actions))
        _, info2, infos2, obs2 = play(env, lambda e, o, i: next(replay))
        assert infos1 == infos2 and obs1 == obs2
        assert "grade_seconds" in env.unwrapped.episode_metrics
    finally:
        env.close()


def test_check_env_passes(backend):
    env = gym.make(ENV_ID, **sandbox_kwargs(backend), tasks=["log_analyzer"])
    report = agentgym.check_env(env)
    assert "same seed + same actions -> same episode" in report.passed
    assert report.episodes[0]["reward"] == 1.0 and report.episodes[0]["conversations"] >= 2


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"sandbox": "podman"}, "Unknown sandbox backend"),
        ({"tasks": ["todo"]}, "Unknown AppGen task"),
        ({"sandbox_limits": {"memory": 5}}, "Unknown sandbox limit"),
        ({"memory": {"token_budget": 1500, "summary_max_tokens": 200}}, "token_budget"),
        ({"output_chars": 10}, "output_chars"),
        ({"token_cost": -1}, "token_cost"),
        ({"sandbox": "local"}, "unsafe_local_grading=True"),
        ({"sandbox": "local", "unsafe_local_grading": "yes"}, "true or false"),
    ],
)
def test_bad_configuration_fails_at_make(kwargs, fragment):
    with pytest.raises((ConfigError, UnknownNameError), match=fragment):
        AppGenEnv(**kwargs)


def test_scripted_policy_through_rollout(backend):
    """A policy that only writes junk files and submits: graded, no crash, zero reward."""
    policy = ScriptedPolicy(lambda msgs: '<write path="junk.py">\nx = (\n</write><submit/>')
    [ep] = rollout(ENV_ID, policy, seeds=[5], env_kwargs=sandbox_kwargs(backend))
    assert ep.reward == 0.0 and ep.terminated
    assert ep.reward_breakdown["turns"] == 1
