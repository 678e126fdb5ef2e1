"""Chaos on the Docker backend: a sandbox container killed from outside mid-command.

The episode's ``step`` must raise ``InfraError(reason="sandbox_died")`` (never score the
agent 0 for it), and the shared pool must recover: the next episode gets a healthy
sandbox. Each test is bounded in time (a kill after a fixed delay, commands that would
otherwise run for seconds).
"""

from __future__ import annotations

import shutil
import threading
import time

import gymnasium as gym
import pytest

import agentgym
from agentgym.envs.appgen.taskset import BUILTIN_TASKS_DIR

from .conftest import need_docker

pytestmark = pytest.mark.docker

SLOW_TEST = "import time\n\n\ndef test_slow():\n    time.sleep(8)\n"


@pytest.fixture(autouse=True)
def _docker():
    need_docker()


def _kill_later(container_id: str, delay: float) -> threading.Thread:
    from agentgym.sandbox import docker_client

    def kill() -> None:
        time.sleep(delay)
        docker_client().api.kill(container_id)

    t = threading.Thread(target=kill, daemon=True)
    t.start()
    return t


def _kill_when_running(container_id: str, marker: str, after: float) -> threading.Thread:
    """Kill the container ``after`` seconds after a process whose command line holds
    ``marker`` appears in it: mid-command however long the command took to start (a
    fixed delay from the step's start could land before the grading, on a busy machine,
    and the pool would replace the dead sandbox before grading in it)."""
    from agentgym.sandbox import docker_client

    api = docker_client().api

    def kill() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = api.top(container_id, ps_args="-eo pid,args").get("Processes") or []
            if any(marker in " ".join(row) for row in rows):
                break
            time.sleep(0.05)
        time.sleep(after)
        api.kill(container_id)

    t = threading.Thread(target=kill, daemon=True)
    t.start()
    return t


def _recovers(env) -> None:
    """A new episode on the same shared pool gets a working sandbox."""
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("<run>echo alive</run>")
    assert "alive" in obs[-1].content and not terminated


def test_container_killed_during_a_run_is_an_infra_error():
    env = gym.make("agentgym/AppGen-v0", sandbox="docker", tasks=["rate_limiter"], pool_size=1)
    try:
        env.reset(seed=0)
        victim = env.unwrapped._sandbox.container_id
        killer = _kill_later(victim, 1.5)
        start = time.monotonic()
        with pytest.raises(agentgym.InfraError) as info:
            env.step('<run timeout="20">sleep 15; echo never</run>')
        assert info.value.reason == "sandbox_died"
        assert time.monotonic() - start < 12
        killer.join()
        _recovers(env)
        assert env.unwrapped._sandbox.container_id != victim
    finally:
        env.close()


def test_container_killed_during_grading_is_an_infra_error(tmp_path):
    task_dir = tmp_path / "rate_limiter"
    shutil.copytree(BUILTIN_TASKS_DIR / "rate_limiter", task_dir)
    (task_dir / "tests_hidden" / "test_slow.py").write_text(SLOW_TEST)
    env = gym.make(
        "agentgym/AppGen-v0",
        sandbox="docker",
        tasks=["rate_limiter"],
        task_dirs=[str(tmp_path)],
        pool_size=1,
    )
    try:
        env.reset(seed=0)
        with env.unwrapped._grading_pool.sandbox() as sb:  # its only one: it grades next
            victim = sb.container_id
        killer = _kill_when_running(victim, "apptest_runner", 1.0)  # test_slow: 8 s
        with pytest.raises(agentgym.InfraError) as info:
            env.step("<submit/>")
        assert info.value.reason == "sandbox_died"
        killer.join()
        _recovers(env)
    finally:
        env.close()
