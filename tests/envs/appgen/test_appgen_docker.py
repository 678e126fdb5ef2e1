"""AppGen-v0 on the Docker backend: the oracle on every task, tampering, the eval CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentgym.envs.appgen.grading import grade
from agentgym.envs.appgen.taskset import BUILTIN_TASKS_DIR, load_task, load_tasks
from agentgym.policies import OraclePolicy
from agentgym.rollouts import rollout

from .conftest import need_docker
from .test_appgen_grading import FORCE_PASS_CONFTEST, PATCH_PYTEST, partial

pytestmark = pytest.mark.docker


@pytest.fixture(autouse=True)
def _docker():
    need_docker()


def test_oracle_on_every_library_task_with_docker():
    """The library tasks; full-stack ones are graded in test_fullstack.py."""
    names = [t.name for t in load_tasks() if t.app is None]
    episodes = rollout(
        "agentgym/AppGen-v0",
        OraclePolicy(),
        seeds=range(len(names)),
        concurrency=4,
        env_kwargs={"sandbox": "docker", "tasks": names},
    )
    assert sorted(e.reward_breakdown["task"] for e in episodes) == names
    for ep in episodes:
        assert ep.reward == 1.0, (ep.reward_breakdown["task"], ep.reward_breakdown["errors"])
        assert ep.num_conversations >= 2
        assert ep.metrics["sandbox_backend"] == "docker"


def test_tampering_gains_nothing_with_docker():
    from agentgym.sandbox import open_sandbox

    task = load_task(BUILTIN_TASKS_DIR / "rate_limiter")
    with open_sandbox("docker", timeout=120) as sb:
        honest = grade(task, partial(task), sb)
        sb.reset()
        conftest = grade(task, {**partial(task), "conftest.py": FORCE_PASS_CONFTEST.encode()}, sb)
        sb.reset()
        patched = partial(task)
        patched["ratelimit/__init__.py"] += PATCH_PYTEST.encode()
        patched_result = grade(task, patched, sb)
    assert 0 < honest.passed < honest.total
    assert conftest.passed == honest.passed and not conftest.tampered
    # pytest is patched in the project's own process now, where it changes nothing
    assert patched_result.per_test == honest.per_test and not patched_result.tampered


def test_eval_cli_oracle_json(tmp_path):
    episodes = tmp_path / "episodes.jsonl"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentgym",
            "eval",
            "agentgym/AppGen-v0",
            "--policy",
            "oracle",
            "--episodes",
            "2",
            "--seed",
            "4",
            "--json",
            "--env-arg",
            "sandbox=docker",
            "--out",
            str(episodes),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    # what the reference solution lost, if anything: each hidden test that did not pass
    lost = {
        (ep["task_id"], test): (verdict, ep["reward_breakdown"]["errors"])
        for ep in map(json.loads, episodes.read_text().splitlines())
        for test, verdict in ep["reward_breakdown"]["per_test"].items()
        if verdict != "passed"
    }
    assert summary["mean_reward"] == 1.0, lost
    assert summary["min_conversations"] >= 2
