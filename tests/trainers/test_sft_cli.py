"""``agentgym sft`` through the command line, as a user meets it (issue 34, findings 3 and
10): Ctrl-C keeps the warm start (a checkpoint and advice to ``--resume``), ``--resume``
and ``--resume-if-present`` are accepted with the run folder's rules, and a finished run
leaves ``plots/`` and prints no DeepSpeed accelerator warning."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import TINY_QWEN

from agentgym.trainers.logging import read_jsonl

HELPERS = Path(__file__).resolve().parents[1] / "helpers"


def _args(out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "agentgym",
        "sft",
        f"run.output_dir={out}",
        "run.threads=1",
        "run.progress=false",
        "envs=[{id: 'trainer_toy_envs:agentgym-test/EvenChars-v0'}]",
        "data.source=oracle",
        "data.num_tasks=8",
        "train.batch_size=4",
        "train.save_every=0",
        f"model.preset_overrides={json.dumps(TINY_QWEN)}",
        "eval.at_ends=false",
        "max_tokens=4",
        *extra,
    ]


def _env() -> dict[str, str]:
    env = {**os.environ}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HELPERS), env.get("PYTHONPATH")]))
    env.pop("DS_ACCELERATOR", None)  # as a user's shell has it
    return env


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=600, env=_env())


def _steps(out: Path) -> list[int]:
    return [r["step"] for r in read_jsonl(out / "metrics.jsonl") if "losses/sft" in r]


def _interrupt(out: Path) -> subprocess.CompletedProcess[str]:
    """Start a long run (--resume-if-present in an empty folder: it starts), Ctrl-C it
    once it has taken two steps."""
    proc = subprocess.Popen(
        _args(out, "train.max_steps=100000", "--resume-if-present"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    deadline = time.monotonic() + 300
    while len(_steps(out)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_ctrl_c_keeps_the_warm_start_and_resume_finishes_it(tmp_path):
    out = tmp_path / "sft"
    stopped = _interrupt(out)
    assert stopped.returncode == 128 + signal.SIGINT, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr, stopped.stderr[-3000:]
    assert "SIGINT: finishing step" in stopped.stderr
    assert "Continue with the same command and --resume" in stopped.stderr
    done = _steps(out)
    ckpts = sorted(p.name for p in (out / "checkpoints").glob("step_*"))
    assert ckpts == [f"step_{done[-1]:06d}"]  # the step in progress, finished and saved
    assert not (out / "model").exists()

    # without a flag the folder is refused, naming the checkpoint and --resume
    again = _run(*_args(out, "train.max_steps=100000"))
    assert again.returncode == 2 and "already holds a run" in again.stderr
    assert ckpts[-1] in again.stderr and "--resume" in again.stderr

    last = done[-1] + 2
    resumed = _run(*_args(out, "--resume", f"train.max_steps={last}"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {out / 'checkpoints' / ckpts[-1]}" in resumed.stderr
    assert _steps(out) == list(range(1, last + 1))
    assert (out / "model" / "config.json").is_file()  # what `agentgym train model.path=` reads
    assert (out / "plots" / "training.png").is_file()
    assert f"trained steps 1-{last}" in resumed.stdout
    # quiet: DeepSpeed's accelerator warning (save_pretrained imports it), HF's shard bar
    for noise in ("Setting accelerator to CPU", "Writing model shards"):
        assert noise not in resumed.stderr + stopped.stderr, noise


def test_resume_needs_a_checkpoint(tmp_path):
    out = tmp_path / "empty"
    r = _run(*_args(out, "train.max_steps=1", "--resume"))
    assert r.returncode == 2, r.stderr[-3000:]
    assert "nothing to resume" in r.stderr and "--resume-if-present" in r.stderr
    assert not out.exists()
