"""The local backend never grades an AppGen project silently (issue 30).

On the local backend the grader and the project run as one user, so a project can rewrite
the grader (an empty scaffold scored 1.0 that way). Grading there needs
``unsafe_local_grading=True``; ``sandbox="auto"`` without a usable Docker is an error that
says how to get Docker; every episode names the backend that graded it. Docker is made
unusable here by pointing ``DOCKER_HOST`` nowhere (the Docker SDK reads it), so these tests
need no engine, and the eval CLI is checked the way a user would meet it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

from agentgym.envs.appgen import sandboxes
from agentgym.envs.appgen.env import AppGenEnv
from agentgym.envs.appgen.grading import grade
from agentgym.envs.appgen.taskset import BUILTIN_TASKS_DIR, load_task
from agentgym.errors import ConfigError
from agentgym.sandbox import SandboxLimits

NO_DOCKER = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/agentgym-no-docker.sock"}
HOW_TO_GET_DOCKER = ("bash scripts/ensure_docker.sh", "agentgym sandbox doctor")


def _eval(*extra: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "agentgym", "eval", "agentgym/AppGen-v0", "--policy", "oracle"]
    argv += ["--episodes", "1", "--env-arg", 'tasks=["rate_limiter"]', *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, env=NO_DOCKER)


def test_eval_without_docker_stops_with_how_to_get_it():
    r = _eval()
    assert r.returncode == 2, (r.stdout, r.stderr[-2000:])
    assert "agentgym eval: error:" in r.stderr
    for fix in (*HOW_TO_GET_DOCKER, "unsafe_local_grading=true"):
        assert fix in r.stderr, r.stderr
    assert "mean_reward" not in r.stdout  # nothing was graded


def test_eval_without_docker_grades_locally_only_with_the_opt_in():
    from .conftest import LOCAL_PROBLEM

    if LOCAL_PROBLEM is not None:
        pytest.skip(LOCAL_PROBLEM)
    r = _eval("--env-arg", "unsafe_local_grading=true", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    assert '"mean_reward": 1.0' in r.stdout


def test_local_without_the_opt_in_fails_at_make():
    with pytest.raises(ConfigError, match="unsafe_local_grading=True") as info:
        AppGenEnv(sandbox="local", tasks=["rate_limiter"])
    assert all(fix in str(info.value) for fix in HOW_TO_GET_DOCKER)


def test_auto_falling_back_to_local_fails_at_reset(monkeypatch):
    monkeypatch.setattr(sandboxes, "resolve_backend", lambda name, **kw: "local")
    monkeypatch.setattr(sandboxes, "docker_available", lambda: "no engine answers")
    env = AppGenEnv(tasks=["rate_limiter"])  # make works: auto is resolved at reset
    try:
        with pytest.raises(ConfigError, match="no usable Docker") as info:
            env.reset(seed=0)
    finally:
        env.close()
    text = str(info.value)
    assert "no engine answers" in text and all(fix in text for fix in HOW_TO_GET_DOCKER)


def test_grade_refuses_a_sandbox_without_users():
    local = types.SimpleNamespace(supports_users=False, backend="local", limits=SandboxLimits())
    task = load_task(BUILTIN_TASKS_DIR / "rate_limiter")
    with pytest.raises(ConfigError, match="one user"):
        grade(task, task.initial_files(), local)


def _episodes(isolated: bool) -> list:
    from agentgym.benchmarks.runner import ENTRY_KEY
    from agentgym.types import Episode

    breakdown = {"sandbox": "docker" if isolated else "local", "grader_isolated": isolated}
    breakdown.update(passed=3, total=3, pass_rate=1.0)
    return [
        Episode(
            env_id="agentgym/AppGen-v0",
            task_id=f"t{seed}",
            seed=seed,
            reward=1.0,
            reward_breakdown=dict(breakdown),
            terminated=True,
            metrics={ENTRY_KEY: 0},
        )
        for seed in (0, 1)
    ]


def test_benchmark_results_and_leaderboard_mark_grading_without_isolation():
    from agentgym.benchmarks.leaderboard import group_results, page_data, render_markdown
    from agentgym.benchmarks.runner import score
    from agentgym.benchmarks.suites import Suite, SuiteEntry

    suite = Suite(
        name="appgen-two",
        version=1,
        entries=(SuiteEntry("tasks", "agentgym/AppGen-v0", (0, 1)),),
        samples_per_task=1,
        metrics=("pass_rate",),
        primary_metric="pass_rate",
        plot_metric="pass_rate",
        success="all_tests",
    )
    results = {}
    for isolated in (True, False):
        policy = {"spec": f"p{isolated}", "label": "docker" if isolated else "local"}
        results[isolated] = score(suite, "h" * 64, _episodes(isolated), policy=policy)
    assert results[True]["grading"] == {"sandboxes": {"docker": 2}, "unisolated_episodes": 0}
    assert results[True]["graded_without_isolation"] is False
    assert results[False]["grading"] == {"sandboxes": {"local": 2}, "unisolated_episodes": 2}
    assert results[False]["graded_without_isolation"] is True

    groups = group_results(results.values())
    md = render_markdown(groups)
    assert "| local (graded without isolation) |" in md
    assert "| docker |" in md
    rows = {r["label"]: r for r in page_data(groups)["suites"][0]["rows"]}
    assert rows["local"]["unisolated"] is True and rows["docker"]["unisolated"] is False
