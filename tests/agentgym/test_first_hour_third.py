"""A newcomer's first hour, third pass (issue 44): the mistakes a user makes end in one
message that names the fix, never a traceback, and never cost them a file.

Through the CLI as a user meets it: in process (``agentgym.cli.main``) where one process
is what the user runs, as a subprocess where processes matter (torchrun, Ctrl-C). One
tiny two-step training run is shared by the module.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentgym.cli import main

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
TINY = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}


def _train_args(out: Path, *extra: str) -> list[str]:
    return [
        "train",
        f"run.output_dir={out}",
        "run.max_steps=2",
        "run.save_every=1",
        "run.threads=1",
        "run.progress=false",
        "run.plots=false",
        "envs=[{id: 'trainer_toy_envs:agentgym-test/EvenChars-v0'}]",
        f"model.preset_overrides={json.dumps(TINY)}",
        "rollout.group_size=2",
        "rollout.batch_tasks=2",
        "rollout.max_tokens=4",
        *extra,
    ]


def _refused(capsys, argv: list[str], *needles: str) -> str:
    """``agentgym ARGV`` in process: status 2, one message holding every needle."""
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err[-3000:]
    assert "Traceback" not in err
    for n in needles:
        assert n in err, err[-3000:]
    return err


@pytest.fixture(scope="module")
def train_run(tmp_path_factory):
    """A finished two-step ``agentgym train`` run (checkpoints at steps 1 and 2)."""
    sys.path.insert(0, str(HELPERS))
    out = tmp_path_factory.mktemp("first_hour") / "run"
    assert main(_train_args(out)) == 0
    return out


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file's bytes, the lock aside (checking the folder takes and frees it)."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and p.name != "run.lock"
    }


# ------------------------------------------------------------------- --resume mistakes


def test_sft_resume_on_a_train_run_is_refused_and_touches_nothing(train_run, capsys):
    before = _snapshot(train_run)
    _refused(
        capsys,
        ["sft", "configs/quickstart_sft.yaml", f"run.output_dir={train_run}", "--resume"],
        "holds an `agentgym train` run",
        "run.output_dir",
    )
    assert _snapshot(train_run) == before  # its config.yaml and run_info.json included


def test_resume_after_changing_the_adapters_shape_names_the_setting(train_run, capsys):
    before = _snapshot(train_run)
    _refused(
        capsys,
        [*_train_args(train_run), "lora.r=16", "--resume", "run.max_steps=3"],
        "lora.r",
        "16",
        "8",
        "--overwrite",
    )
    assert _snapshot(train_run) == before


def test_resume_with_max_steps_below_the_steps_done_says_what_to_do(train_run, capsys):
    before = _snapshot(train_run)
    _refused(
        capsys,
        [*_train_args(train_run), "--resume", "run.max_steps=1"],
        "2 steps",
        "run.max_steps=1",
        "run.max_steps=3",
    )
    assert _snapshot(train_run) == before


# ------------------------------------------------------------------- models


def test_a_hub_id_says_models_are_never_downloaded(capsys, tmp_path):
    hub = "Qwen/Qwen2.5-0.5B-Instruct"
    for argv in (
        ["train", "configs/quickstart_dapo.yaml", f"model.path={hub}",
         f"run.output_dir={tmp_path / 'r'}"],
        ["eval", "agentgym/MemoryRecall-v0", "--policy", f"hf:{hub}", "--episodes", "1"],
        ["serve", "--engine", "hf", "--model", hub],
    ):  # fmt: skip
        err = _refused(capsys, argv, "never downloads", "--local-dir", hub)
        assert "agentgym sft" not in err  # not the quickstart's model
    assert not (tmp_path / "r").exists()


def test_a_model_folder_without_a_tokenizer_says_so(capsys, tmp_path):
    from agentgym.generation import build_preset, build_tokenizer, save_model

    tok = build_tokenizer()
    model = save_model(build_preset("tiny-qwen2", tok, overrides=TINY), tok, tmp_path / "m")
    for p in Path(model).iterdir():
        if p.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            p.unlink()
    _refused(
        capsys,
        [*_train_args(tmp_path / "r"), f"model.path={model}"],
        "tokenizer",
        str(model),
    )
    _refused(
        capsys,
        ["eval", "agentgym/MemoryRecall-v0", "--policy", f"hf:{model}", "--episodes", "1"],
        "tokenizer",
    )


def test_a_bad_env_argument_value_is_a_message(capsys):
    _refused(
        capsys,
        ["eval", "agentgym/MemoryRecall-v0", "--env-arg", "memory.max_conversations=abc",
         "--episodes", "1"],
        "memory.max_conversations",
        "integer",
    )  # fmt: skip


# ------------------------------------------------------------------- several processes


def _cli(*args: str, **kw) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HELPERS), os.environ.get("PYTHONPATH")]))}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "agentgym", *args],
        capture_output=True, text=True, timeout=600, env=env, **kw,
    )  # fmt: skip


def test_a_config_error_of_a_multi_process_run_is_one_message_and_leaves_no_folder(tmp_path):
    out = tmp_path / "run"
    fsdp = ["distributed.strategy=fsdp2", "--nproc", "2"]
    # caught before any process starts
    r = _cli(*_train_args(out), f"model.path={tmp_path / 'nosuch'}", *fsdp)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "launching" not in r.stderr
    assert r.stderr.count("does not exist") == 1 and "--resume" not in r.stderr
    assert not out.exists()
    # found by the ranks: their message, no torchrun traceback, no --resume, no folder
    bad = "envs=[{id: agentgym/MemoryRecall-v0, kwargs: {memory: {max_conversations: abc}}}]"
    r = _cli(*_train_args(out), bad, *fsdp)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "memory.max_conversations must be an integer" in r.stderr
    assert "--resume" not in r.stderr, r.stderr[-3000:]
    assert not out.exists()


def test_ctrl_c_of_a_two_process_run_stops_with_a_checkpoint_and_no_traceback(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HELPERS), os.environ.get("PYTHONPATH")]))}  # fmt: skip
    argv = _train_args(out, "run.max_steps=500", "run.save_every=0", "run.progress=true")
    log = tmp_path / "log.txt"
    with log.open("w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentgym", *argv, "distributed.strategy=fsdp2",
             "--nproc", "2"],
            stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while "[dapo] " not in log.read_text():  # the first step is done
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.5)
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group
            rc = proc.wait(timeout=180)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    text = log.read_text()
    assert "Traceback" not in text, text[-4000:]
    assert rc == 128 + signal.SIGINT, text[-3000:]
    assert "--resume" in text.splitlines()[-1], text[-2000:]
    assert any((out / "checkpoints").glob("step_*")), text[-2000:]
    shutil.rmtree(out)


# ------------------------------------------------------------------- smaller ones


def test_check_task_on_a_folder_without_a_task_says_so(capsys, tmp_path):
    (tmp_path / "notes").mkdir()
    err = _refused(
        capsys,
        ["appgen", "check-task", str(tmp_path / "notes")],
        "task.toml",
        str(tmp_path / "notes"),
        "agentgym appgen new-task",
    )
    assert err.count("error") == 1


def test_observations_go_straight_to_an_openai_client():
    import gymnasium as gym

    from agentgym import Message, to_openai

    env = gym.make("agentgym/MemoryRecall-v0")
    obs, _ = env.reset(seed=0)
    env.close()
    # what openai.OpenAI().chat.completions.create(messages=obs) serialises
    body = json.loads(json.dumps({"model": "m", "messages": obs}))
    assert body["messages"] == to_openai(obs)
    assert body["messages"][0].keys() == {"role", "content"}
    m = Message("user", "hi")
    assert dict(m) == {"role": "user", "content": "hi"} and m["content"] == "hi"
    assert m == Message.from_dict(dict(m))


def test_plan_says_its_figures_are_estimates_not_runs(capsys):
    assert main(["plan", "configs/deepseek_v3_671b_48xh100.yaml"]) == 0
    out = capsys.readouterr().out
    assert "LoRA: FITS" in out
    assert "has not run on GPUs" in out and "estimate" in out
