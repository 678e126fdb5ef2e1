"""A newcomer's first hour (issue 22): each input is checked the same strict way, through
the CLI where a user meets it, and bad actions never raise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import gymnasium as gym
import pytest

import agentgym
from agentgym import ActResult, ConversationEnv, Task, approx_tokens, clean_text

AGENTGYM = [sys.executable, "-m", "agentgym"]


def cli(*args: str, cwd=None, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*AGENTGYM, *args], capture_output=True, text=True, timeout=300, cwd=cwd, input=stdin,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[1] / "helpers"), os.environ.get("PYTHONPATH")]))},
    )  # fmt: skip


def _clean_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr


# ----------------------------------------------------------------------------- bad actions


class StrictEnv(ConversationEnv):
    """Writes every action as UTF-8, as an env that logs or grades replies does."""

    def _begin(self, seed, options):
        return Task(task_id="strict", prompt="Say anything.")

    def _act(self, action):
        action.encode("utf-8")  # raises on a lone surrogate
        return ActResult(done=True)

    def _score(self, end_reason):
        return 1.0, {}


@pytest.mark.parametrize("env", ["strict", "agentgym/MemoryRecall-v0", "agentgym/BalancedMath-v0"])
def test_a_reply_with_a_lone_surrogate_never_raises(env):
    e = StrictEnv() if env == "strict" else gym.make(env)
    e.reset(seed=0)
    obs, reward, *_ = e.step("the answer \ud800 is 4")  # what JSON can decode "\\ud800" to
    assert "\ufffd" in obs[-1].content or env != "strict"
    assert approx_tokens("\ud800") == 1
    assert clean_text("a\udfffb") == "a\ufffdb"
    e.close()


# ----------------------------------------------------------------------------- env arguments


@pytest.mark.parametrize("command", ["eval", "check-env", "play"])
def test_an_unknown_env_argument_gets_a_suggestion_not_a_traceback(command):
    r = cli(command, "agentgym/BalancedMath-v0", "--env-arg", "level=2", stdin="")
    _clean_error(r, "'level'", "Did you mean: 'levels'", "agentgym info agentgym/BalancedMath-v0")


def test_unknown_arguments_are_checked_at_make_for_every_env():
    with pytest.raises(agentgym.UnknownNameError, match="max_turns"):
        agentgym.make("agentgym/MemoryRecall-v0", max_turn=3)
    # the base class's arguments count as known for every subclass
    assert "max_turns" in agentgym.registration.env_arguments("agentgym/MemoryRecall-v0")


# ----------------------------------------------------------------------------- the CLI


def test_play_refuses_a_non_text_env_and_a_negative_seed():
    _clean_error(cli("play", "CartPole-v1", stdin=""), "is not a text environment")
    _clean_error(
        cli("play", "agentgym/MemoryRecall-v0", "--seed", "-1", stdin=""), "--seed must be >= 0"
    )
    _clean_error(cli("eval", "agentgym/MemoryRecall-v0", "--seed", "-1"), "--seed must be >= 0")


def test_an_endpoint_url_without_a_scheme_fails_at_once():
    r = cli(
        "eval", "agentgym/MemoryRecall-v0", "--policy", "openai:m@127.0.0.1:9", "--episodes", "1"
    )
    _clean_error(r, "needs http:// or https://", "'http://127.0.0.1:9'")


@pytest.mark.parametrize("name", ["agentgym", "gymnasium", "gym"])
def test_new_env_refuses_a_name_that_would_shadow_a_library(tmp_path, name):
    r = cli("new-env", name, "--dir", str(tmp_path / "pkg"))
    _clean_error(r, f"package named '{name}'")
    assert not (tmp_path / "pkg").exists()


def test_a_scripted_policy_module_in_the_current_folder_is_found(tmp_path):
    (tmp_path / "mypolicy.py").write_text("def reply(messages):\n    return 'Noted.'\n")
    r = cli(
        "eval", "agentgym/MemoryRecall-v0", "--policy", "scripted:mypolicy:reply",
        "--episodes", "2", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["episodes"] == 2


def test_a_directory_given_as_a_config_says_so(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("run: {max_steps: 1}\n")
    _clean_error(
        cli("train", str(run), "--print-config"), "is a directory", str(run / "config.yaml")
    )


# ----------------------------------------------------------------------------- evaluating a run


def test_eval_defaults_to_held_out_seeds_and_takes_a_runs_envs(tmp_path):
    r = cli("eval", "agentgym/MemoryRecall-v0", "--episodes", "1", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["first_seed"] == agentgym.HELD_OUT_SEED_START
    config = tmp_path / "config.yaml"
    config.write_text(
        "envs:\n"
        "  - {id: agentgym/MemoryRecall-v0, kwargs: {num_facts: 3}}\n"
        "  - {id: agentgym/BalancedMath-v0, kwargs: {levels: 1}}\n"
        "eval: {seed_start: 2000000}\n"
    )
    r = cli("eval", "--config", str(config), "--episodes", "2", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [s["env_id"] for s in out] == ["agentgym/MemoryRecall-v0", "agentgym/BalancedMath-v0"]
    assert all(s["first_seed"] == 2_000_000 for s in out)
    one = cli(
        "eval", "agentgym/BalancedMath-v0", "--config", str(config), "--episodes", "1", "--json"
    )
    assert json.loads(one.stdout)["env_id"] == "agentgym/BalancedMath-v0"
    _clean_error(
        cli("eval", "agentgym/AppGen-v0", "--config", str(config)), "is not one of the envs"
    )


def test_an_hf_adapter_can_be_named_by_its_run_checkpoint_or_latest(tmp_path):
    from agentgym.generation import resolve_adapter

    ckpts = tmp_path / "run" / "checkpoints"
    for step in (1, 2):
        adapter = ckpts / f"step_{step:06d}" / "adapter"
        adapter.mkdir(parents=True)
        (adapter / "adapter_config.json").write_text("{}")
        (adapter.parent / "trainer_state.json").write_text("{}")
    (ckpts / "latest").write_text("step_000001")  # the pointer, not the newest folder
    newest = ckpts / "step_000002" / "adapter"
    pointed = ckpts / "step_000001" / "adapter"
    assert resolve_adapter(str(ckpts / "latest")) == pointed
    assert resolve_adapter(str(ckpts / "step_000002")) == newest
    assert resolve_adapter(str(newest)) == newest
    assert resolve_adapter(str(tmp_path / "run")) == pointed
    with pytest.raises(agentgym.ConfigError, match="no peft adapter"):
        resolve_adapter(str(tmp_path / "nowhere"))


# ----------------------------------------------------------------------------- the SDK


class BudgetOnly(ConversationEnv):
    # memory options, but no "enabled": True
    memory_defaults: ClassVar[dict] = {"token_budget": 256, "summary_max_tokens": 32}

    def _begin(self, seed, options):
        return Task(task_id="b", prompt="Count.")

    def _act(self, action):
        return ActResult(feedback="more", done=self._turns >= 3)

    def _score(self, end_reason):
        return 1.0, {}

    def oracle_action(self, observation):
        return "next"


def test_check_env_says_whether_memory_turns_fired():
    report = agentgym.check_env(BudgetOnly())
    assert any("memory turns never fire" in w and "token_budget" in w for w in report.warnings)
    recall = agentgym.check_env(gym.make("agentgym/MemoryRecall-v0"))
    assert any(p.startswith("memory turns exercised") for p in recall.passed)
