"""Every command reads its config the same strict way (issue 22): a key the command
does not use is an error that names the key it has, and the override examples its
``--help`` shows are accepted."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym import UnknownNameError, load_config
from agentgym.cli.train import SFT_OVERRIDE_EXAMPLES, TRAIN_OVERRIDE_EXAMPLES
from agentgym.trainers import SFTConfig, TrainConfig

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentgym", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_sft_refuses_the_trainers_run_length_key_and_names_its_own():
    res = _cli("sft", "configs/quickstart_sft.yaml", "run.max_steps=5", "--print-config")
    assert res.returncode != 0
    assert "run.max_steps" in res.stderr and "train.max_steps" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(
    "cls, key, meant",
    [
        (SFTConfig, "run.save_every", None),
        (SFTConfig, "run.max_steps", "train.max_steps"),
        (TrainConfig, "rollout.lr", "optim.lr"),
    ],
)
def test_unknown_key_points_at_the_section_that_has_it(cls, key, meant):
    with pytest.raises(UnknownNameError) as err:
        load_config(cls, None, [f"{key}=3"])
    if meant is not None:
        assert meant in err.value.suggestions
        assert meant in str(err.value)


@pytest.mark.parametrize(
    "command, cls, examples",
    [("train", TrainConfig, TRAIN_OVERRIDE_EXAMPLES), ("sft", SFTConfig, SFT_OVERRIDE_EXAMPLES)],
)
def test_help_examples_are_accepted(command, cls, examples):
    overrides = [shlex.split(e)[0] for e in examples]
    cfg = load_config(cls, None, overrides)
    assert cfg.envs[0].id == "agentgym/MemoryRecall-v0"
    res = _cli(command, "--help")
    assert res.returncode == 0
    assert all(e in " ".join(res.stdout.split()) for e in examples)
