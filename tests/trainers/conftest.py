"""Shared fixtures: tiny models and the toy environments."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import trainer_toy_envs as toy_envs

TINY_QWEN = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tokenizer():
    from agentgym.generation import build_tokenizer

    return build_tokenizer()


@pytest.fixture
def toy_envs_registered():
    toy_envs.register()
    return toy_envs


def train_in_processes(args: list[str], nproc: int = 2) -> None:
    """``agentgym train ARGS --nproc N`` in a subprocess, the toy envs importable; the
    run must succeed (its stderr's tail is the failure message)."""
    import os
    import subprocess

    helpers = Path(__file__).resolve().parents[1] / "helpers"
    path = os.pathsep.join(filter(None, [str(helpers), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "agentgym", "train", *args, "--nproc", str(nproc)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Setting OMP_NUM_THREADS" not in proc.stderr  # no torchrun banner on every run


def assert_same_critic(out: Path, single: Path, *, steps: tuple[int, ...], rel: float) -> None:
    """A multi-process run's critic equals the one-process run's: the value pretraining
    and step logs (value loss, explained variance, advantages; the critic's gradient
    norm to ``rel``), a clip that bit, and ``critic.safetensors`` at ``steps``."""
    from safetensors.torch import load_file

    from agentgym.trainers.logging import read_jsonl

    for log in ("critic_pretrain.jsonl", "metrics.jsonl"):
        got, want = read_jsonl(out / log), read_jsonl(single / log)
        assert len(got) == len(want) >= 1
        for a, b in zip(got, want, strict=True):
            for key in ("losses/value", "critic/explained_variance", "critic/advantage_mean"):
                assert a[key] == pytest.approx(b[key], abs=1e-5), (log, key)
            if "losses/critic_grad_norm" in b:
                key = "losses/critic_grad_norm"
                assert a[key] == pytest.approx(b[key], rel=rel), (log, key)
    assert max(r["losses/critic_grad_norm"] for r in read_jsonl(single / "metrics.jsonl")) > 0.2
    for step in steps:
        ckpt = Path("checkpoints") / f"step_{step:06d}" / "critic.safetensors"
        a, b = load_file(str(out / ckpt)), load_file(str(single / ckpt))
        assert a.keys() == b.keys() and any("agentgym_value_head" in k for k in a)
        for k in a:
            torch.testing.assert_close(a[k], b[k], atol=1e-4, rtol=1e-4, msg=k)
