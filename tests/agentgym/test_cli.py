"""The agentgym command line, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym.cli.envs import parse_env_args
from agentgym.cli.new_env import names
from agentgym.errors import ConfigError

AGENTGYM = [sys.executable, "-m", "agentgym"]


def cli(
    *args: str, env: dict | None = None, stdin: str | None = None, cwd=None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*AGENTGYM, *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=300,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def test_list_shows_builtin_envs():
    r = cli("list", "--json")
    assert r.returncode == 0, r.stderr
    ids = [row["id"] for row in json.loads(r.stdout)]
    assert "agentgym/MemoryRecall-v0" in ids


def test_check_env_exits_zero_for_memory_recall():
    r = cli("check-env", "agentgym/MemoryRecall-v0")
    assert r.returncode == 0, r.stderr
    assert "same seed + same actions" in r.stdout


def test_eval_oracle_json_on_memory_recall(tmp_path):
    out = tmp_path / "eps.jsonl"
    r = cli(
        "eval",
        "agentgym/MemoryRecall-v0",
        "--policy",
        "oracle",
        "--episodes",
        "8",
        "--json",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["env_id"] == "agentgym/MemoryRecall-v0"
    assert summary["episodes"] == 8 and summary["mean_reward"] == 1.0
    assert summary["min_conversations"] > 1
    assert len(out.read_text().splitlines()) == 8


def test_eval_env_args_reach_the_env():
    r = cli("eval", "MemoryRecall-v0", "--episodes", "2", "--json", "--env-arg", "memory=false")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["mean_conversations"] == 1.0


def test_unknown_env_is_a_clear_error_not_a_traceback():
    r = cli("eval", "agentgym/MemoryRecal-v0", "--json")
    assert r.returncode == 2
    assert "Did you mean: 'agentgym/MemoryRecall-v0'" in r.stderr
    assert "Traceback" not in r.stderr


def test_info_prints_the_spec_sheet():
    r = cli("info", "MemoryRecall-v0")
    assert r.returncode == 0 and "## Rewards" in r.stdout and "## Version history" in r.stdout


def test_play_lets_a_person_type_actions():
    r = cli(
        "play",
        "MemoryRecall-v0",
        "--seed",
        "0",
        "--env-arg",
        "memory=false",
        "--env-arg",
        "num_facts=1",
        "--env-arg",
        "num_distractors=1",
        "--env-arg",
        "chunk_size=1",
        stdin="ok\n.\nok\n.\nlocker 1: 0000\n.\n",
    )
    assert r.returncode == 0, r.stderr
    assert "Part 1/2" in r.stdout and "episode over: reward 0.000" in r.stdout


def test_parse_env_args_json_values_and_errors():
    assert parse_env_args(["a=1", "b=true", "c=hello", 'd={"x": [1]}']) == {
        "a": 1,
        "b": True,
        "c": "hello",
        "d": {"x": [1]},
    }
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_env_args(["novalue"])


def test_a_dotted_env_arg_sets_one_field_of_a_dict_argument():
    base = {"memory": {"token_budget": 160, "every_k_turns": 1}, "num_facts": 1}
    got = parse_env_args(["memory.max_conversations=2", "num_facts=2"], base)
    assert got == {
        "memory": {"token_budget": 160, "every_k_turns": 1, "max_conversations": 2},
        "num_facts": 2,
    }
    assert base["memory"] == {"token_budget": 160, "every_k_turns": 1}  # not changed
    assert parse_env_args(["memory.max_conversations=3"]) == {"memory": {"max_conversations": 3}}
    with pytest.raises(ConfigError, match="not a dict of options"):
        parse_env_args(["memory.max_conversations=3"], {"memory": False})


def test_eval_with_fewer_conversations_than_the_episode_needs(tmp_path):
    # a training config's env, evaluated with memory.max_conversations lowered: the
    # episodes run out of summary rounds before the question (SUPO's overlong)
    cfg = tmp_path / "config.yaml"
    memory = {
        "every_k_turns": 1,
        "token_budget": 160,
        "summary_max_tokens": 20,
        "reserve_tokens": 8,
        "summary_prompt": "Context full: write your summary.",
        "resume_template": "{task}\n\n## Memory\n{memory}{digest}",
    }
    kwargs = {"num_facts": 1, "num_distractors": 2, "chunk_size": 1, "memory": memory}
    cfg.write_text(json.dumps({"envs": [{"id": "agentgym/MemoryRecall-v0", "kwargs": kwargs}]}))
    args = ("eval", "--config", str(cfg), "--policy", "oracle", "--episodes", "3", "--json")
    full = cli(*args)
    short = cli(*args, "--env-arg", "memory.max_conversations=3")
    assert full.returncode == 0 and short.returncode == 0, full.stderr + short.stderr
    full, short = json.loads(full.stdout), json.loads(short.stdout)
    assert full["mean_reward"] == 1.0 and full["overlong"] == 0
    assert full["mean_conversations"] == 4.0 and full["mean_summary_tokens"] > 0
    assert short["mean_reward"] == 0.0 and short["overlong"] == 3
    assert short["mean_conversations"] == 3.0


def test_new_env_names():
    assert names("word-ladder") == {
        "package": "word_ladder",
        "cls": "WordLadderEnv",
        "dist": "word-ladder",
        "env_id": "word_ladder/WordLadder-v0",
        "title": "word ladder",
    }
    with pytest.raises(ConfigError):
        names("9lives")


@pytest.mark.slow
def test_new_env_package_installs_and_passes_the_checker(tmp_path):
    pkg = tmp_path / "pkg"
    r = cli("new-env", "word-ladder", "--dir", str(pkg))
    assert r.returncode == 0, r.stderr
    site = tmp_path / "site"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(pkg),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pip.returncode == 0, pip.stderr
    env = {"PYTHONPATH": str(site)}
    r = cli("list", env=env)
    assert "word_ladder/WordLadder-v0" in r.stdout and "plugin" in r.stdout
    r = cli("check-env", "word_ladder/WordLadder-v0", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    t = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=pkg,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )
    assert t.returncode == 0, t.stdout + t.stderr
    assert "3 passed" in t.stdout
    assert not any(Path(site).glob("agentgym*")), "the plugin must not vendor agentgym"


def test_a_reader_that_goes_away_ends_the_command_quietly():
    """``agentgym ... | head``: a closed pipe is not a traceback."""
    code = (
        "import agentgym.cli.envs as envs\n"
        "def cmd_list(args):\n"
        "    print('first line', flush=True)\n"
        "    raise BrokenPipeError\n"
        "envs.cmd_list = cmd_list\n"
        "from agentgym.cli import main\n"
        "raise SystemExit(main(['list']))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0
    assert r.stdout == "first line\n"
    assert "Traceback" not in r.stderr


def test_eval_keeps_the_good_episodes_and_reports_the_failed_ones(tmp_path):
    """An env that fails on 1 of 16 seeds: 15 scored, 1 reported (not a zero), exit 1."""
    out = tmp_path / "eps.jsonl"
    r = cli(
        "eval",
        "trainer_toy_envs:agentgym-test/EvenChars-v0",
        "--episodes",
        "16",
        "--json",
        "--out",
        str(out),
        "--retries",
        "1",
        "--seed",
        "0",
        "--env-arg",
        "fail_on_seeds=[5]",
        env={"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "helpers")},
    )
    assert r.returncode == 1, r.stderr
    summary = json.loads(r.stdout)
    assert summary["episodes"] == 15 and summary["failed"] == 1
    assert summary["failed_by_reason"] == {"injected": 1}
    assert summary["retried"] == 1  # its first attempt, played again (and failing again)
    assert summary["mean_reward"] == 1.0  # the oracle's; the failure is not a zero
    assert "1 of 16 episodes failed" in r.stderr and "seed 5" in r.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 16 and [x["seed"] for x in lines if "failure" in x] == [5]


def test_eval_counts_an_episode_scored_after_a_retry(tmp_path):
    """A failure that a retry recovered is no failure, but it is counted."""
    r = cli(
        "eval",
        "trainer_toy_envs:agentgym-test/EvenChars-v0",
        "--episodes",
        "4",
        "--json",
        "--seed",
        "0",
        "--env-arg",
        "fail_on_seeds=[2]",
        "--env-arg",
        f"fail_once_dir={tmp_path}",
        env={"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "helpers")},
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["episodes"] == 4 and summary["failed"] == 0
    assert summary["retried"] == 1 and summary["retried_by_reason"] == {"injected": 1}


def _subparsers():
    import argparse

    from agentgym.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, sub.choices


def test_every_command_says_what_it_does_and_shows_its_defaults():
    """Each command has a description; every option with a default says it in --help
    (eval's --policy silently defaulted to the oracle)."""
    import argparse

    _, commands = _subparsers()
    assert {"list", "info", "check-env", "play", "new-env", "leaderboard", "eval"} <= set(commands)
    missing = [name for name, p in commands.items() if not (p.description or "").strip()]
    assert not missing, f"no description: {missing}"
    hidden = []
    for name, p in commands.items():
        for action in p._actions:
            default = action.default
            if default in (None, False, [], argparse.SUPPRESS):
                continue
            shown = action.help or ""
            shown = shown % {"default": default} if "%(" in shown else shown
            if "default" not in shown and str(default) not in shown:
                hidden.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert not hidden, f"defaults not shown: {hidden}"
    eval_help = commands["eval"].format_help()
    assert "default: oracle" in " ".join(eval_help.split())


def test_train_is_described_by_the_algorithms_it_runs():
    parser, commands = _subparsers()
    for text in (commands["train"].description, parser.description):
        assert all(a in text for a in ("DAPO", "PPO", "VAPO", "T-PPO")), text


def test_list_has_a_header():
    r = cli("list")
    assert r.returncode == 0, r.stderr
    header, *rows = r.stdout.splitlines()
    assert header.split() == ["ENV", "ID", "FROM", "ENTRY", "POINT"]
    assert any(row.startswith("agentgym/MemoryRecall-v0") for row in rows)


def test_serve_lora_takes_a_run_folder_as_hf_model_at_run_does(tmp_path):
    """``serve --lora NAME=RUN`` names the run's latest checkpoint's adapter, through the
    one resolution ``hf:MODEL@RUN`` uses."""
    from agentgym.cli.serve import parse_lora

    ckpts = tmp_path / "run" / "checkpoints"
    for step in (1, 2):
        adapter = ckpts / f"step_{step:06d}" / "adapter"
        adapter.mkdir(parents=True)
        (adapter / "adapter_config.json").write_text("{}")
        (adapter.parent / "trainer_state.json").write_text("{}")
    (ckpts / "latest").write_text("step_000002")
    newest = ckpts / "step_000002" / "adapter"
    assert parse_lora([f"concise={tmp_path / 'run'}", f"exact={newest}"]) == [
        ("concise", str(newest)),
        ("exact", str(newest)),
    ]
    assert parse_lora([f"old={ckpts / 'step_000001'}"]) == [
        ("old", str(ckpts / "step_000001" / "adapter"))
    ]
    with pytest.raises(ConfigError, match=r"--lora x=.*nowhere: no peft adapter.*run folder"):
        parse_lora([f"x={tmp_path / 'nowhere'}"])
