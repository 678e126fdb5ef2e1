"""Loading at scale on a device mesh (gloo, CPU, torchrun): each rank reads its share.

Every rank of ``tests/helpers/loading_probe.py`` builds the model on meta, splits it and
reads its share of a sharded checkpoint, then trains two steps. Checked per rank, for 1,
2 and 4 processes (ep=2, tp=2 x pp=2, dp_shard=2 x ep=2):

* its peak resident memory above its baseline is at most 1.25x its share of the weights
  (the bytes of the tensors it holds), on a ~170 MB checkpoint;
* the bytes its readers read are at most 1.1x that share;
* its losses are the one-process run's of today's loading path (``from_pretrained``),
  to 1e-6.

A DeepSeek block-fp8 checkpoint trains with its routed experts kept in fp8 under ep=2 (the
learner) and tp=2 (``agentgym train`` itself: generation gathers the experts, dequantized)
as the one-process run on the dequantized checkpoint does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hf_checkpoints import SMALL_SHAPE, tiny_model, write_block_fp8, write_sharded, write_synthetic
from loading_probe import LORA, LORA_SEED, train_two_steps

from agentgym.generation import load_model
from agentgym.trainers.config import AlgorithmConfig, LoraSettings, ModelConfig, OptimConfig
from agentgym.trainers.learner import Learner
from agentgym.trainers.logging import read_jsonl
from agentgym.trainers.models import apply_lora, build_model_and_tokenizer

HELPERS = Path(__file__).resolve().parents[1] / "helpers"


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory) -> Path:
    """``big``: random weights for the memory figures; ``small``: a tiny model to train;
    ``fp8``: the hidden-256 model in DeepSeek's fp8 format."""
    root = tmp_path_factory.mktemp("ckpts")
    write_synthetic(root / "big")
    write_sharded(*tiny_model(**SMALL_SHAPE), root / "small", shards=3)
    write_block_fp8(*tiny_model(), root / "fp8")
    return root


def _one_process(model: torch.nn.Module, tok) -> tuple[list[float], list[float]]:
    torch.set_num_threads(1)
    model = apply_lora(model, LoraSettings(**LORA), seed=LORA_SEED)
    algo, optim = AlgorithmConfig(micro_batch_size=4), OptimConfig(lr=1e-2)
    learner = Learner(model, algo, optim, pad_id=tok.pad_token_id)
    return train_two_steps(learner, len(tok), tok.pad_token_id)


def _probe(tmp_path: Path, sizes: dict, nproc: int, *args: str) -> list[dict]:
    out = tmp_path / "out"
    out.mkdir()
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={nproc}", str(HELPERS / "loading_probe.py"),
        json.dumps(sizes), *args[:1], str(out), *args[1:],
    ]  # fmt: skip
    # torchrun, not agentgym's forked ranks: what a rank holds is measured here, and a
    # forked rank's memory carries its launcher's heap (peaks 5-7% higher, measured)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sizes", "nproc"),
    [({}, 1), ({"ep": 2}, 2), ({"tp": 2, "pp": 2}, 4), ({"dp_shard": 2, "ep": 2}, 4)],
    ids=["1proc", "ep2", "tp2-pp2", "dp_shard2-ep2"],
)
def test_each_rank_reads_and_holds_only_its_share(tmp_path, ckpts, sizes, nproc):
    want = _one_process(*load_model(ckpts / "small"))  # today's path, one process
    rows = _probe(tmp_path, sizes, nproc, str(ckpts / "big"), "--train", str(ckpts / "small"))
    for row in rows:
        share = row["share_bytes"]
        assert row["peak_rss"] - row["baseline_rss"] <= 1.25 * share, row
        assert row["bytes_read"] <= 1.1 * share, row
        assert row["losses"] == pytest.approx(want[0], abs=1e-6)
        assert row["grad_norms"] == pytest.approx(want[1], rel=1e-5)
    if nproc > 1:  # and the shares are shares: together about one model, not one each
        total = sum(r["share_bytes"] for r in rows)
        assert total < 1.2 * rows[0]["share_bytes"] * nproc
        assert max(r["share_bytes"] for r in rows) < 0.7 * _whole_bytes(ckpts / "big")


def _whole_bytes(path: Path) -> int:
    index = json.loads((path / "model.safetensors.index.json").read_text())
    return int(index["metadata"]["total_size"])


@pytest.mark.slow
def test_fp8_experts_train_like_the_dequantized_checkpoint(tmp_path, ckpts):
    """``model.quantize=fp8`` on DeepSeek's format under ep=2: the routed experts stay
    fp8 on their ranks, the rest is dequantized; two steps equal the one-process run on
    the dequantized checkpoint (the same weights: only float rounding differs). tp=2 is
    the end-to-end test below."""
    pytest.importorskip("torchao", reason="model.quantize needs torchao: pip install -e '.[quant]'")
    cfg = ModelConfig(path=str(ckpts / "fp8"), preset=None)
    want = _one_process(*build_model_and_tokenizer(cfg))
    rows = _probe(tmp_path, {"ep": 2}, 2, str(ckpts / "fp8"), "--quantize", "fp8")
    for row in rows:
        assert row["losses"] == pytest.approx(want[0], abs=1e-6)
        assert row["grad_norms"] == pytest.approx(want[1], rel=1e-5)
    whole = _whole_bytes(ckpts / "fp8")  # the fp8 checkpoint's bytes, scales included
    assert all(r["bytes_read"] <= 0.6 * whole for r in rows)  # each rank its own experts


TRAIN = (
    "run.max_steps=2",
    "run.save_every=2",
    "run.threads=1",
    "run.progress=false",
    "run.plots=false",
    "envs=[{id: 'trainer_toy_envs:agentgym-test/EvenChars-v0'}]",
    "model.preset=null",
    "rollout.group_size=4",
    "rollout.batch_tasks=2",
    "rollout.max_tokens=10",
    "algorithm.micro_batch_size=3",
    "optim.lr=0.01",
)


@pytest.mark.slow
def test_agentgym_train_on_an_fp8_checkpoint_under_tp2(tmp_path, ckpts, toy_envs_registered):
    """The trainer end to end: ``model.path`` on the fp8 checkpoint with
    ``model.quantize=fp8`` under tp=2 (each rank reads its share; generation gathers the
    experts dequantized) equals the one-process run on the dequantized checkpoint."""
    pytest.importorskip("torchao", reason="model.quantize needs torchao: pip install -e '.[quant]'")
    from agentgym import load_config
    from agentgym.trainers.config import TrainConfig
    from agentgym.trainers.loop import DAPOTrainer

    path = f"model.path={ckpts / 'fp8'}"
    single = tmp_path / "single"
    DAPOTrainer(load_config(TrainConfig, None, [*TRAIN, path, f"run.output_dir={single}"])).train()
    out = tmp_path / "tp2"
    mesh = ["model.quantize=fp8", "distributed.strategy=fsdp2", "distributed.tp=2"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HELPERS), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "agentgym", "train", *TRAIN, path, *mesh]
    cmd += [f"run.output_dir={out}", "--nproc", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    got, want = read_jsonl(out / "metrics.jsonl"), read_jsonl(single / "metrics.jsonl")
    assert len(got) == len(want) == 2
    for a, b in zip(got, want, strict=True):
        assert a["charts/reward"] == pytest.approx(b["charts/reward"], abs=1e-9)  # same episodes
        assert a["losses/total"] == pytest.approx(b["losses/total"], abs=1e-6)
        assert a["losses/grad_norm"] == pytest.approx(b["losses/grad_norm"], rel=1e-5)
