"""Tensor, expert and pipeline parallelism on the tiny DeepSeek-V3 MoE: gloo, CPU, torchrun.

Each case is a two-step ``agentgym train --nproc N`` run with ``distributed: {dp_shard,
tp, ep, pp}`` and LoRA on the attention projections and the routed experts. It must equal
the one-process run of the same config:

* the same episodes (rewards: generation gathers the split model into the HF engine's),
* the same losses and gradient norms (the update is the one-process update),
* the same saved adapter, an ordinary peft adapter, to float tolerance, identical on
  every rank, and moved (the experts' LoRA included).

The same holds with an int8 base (``model.quantize``) under expert and pipeline
parallelism. ``dp_shard=2 x tp=2`` is FSDP2 over the tensor-parallel DTensors (two-dimensional
shards) and an expert group of ``ep x tp`` with ``dp_shard > 1``: the 671B layout's code
paths, which no layout with a data-parallel size of 1 runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import assert_same_critic
from safetensors.torch import load_file

from agentgym import load_config
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.logging import read_jsonl
from agentgym.trainers.loop import DAPOTrainer

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
ENV = "envs=[{id: 'trainer_toy_envs:agentgym-test/EvenChars-v0'}]"


def _args(out: Path, *extra: str) -> list[str]:
    return [
        f"run.output_dir={out}",
        "run.max_steps=2",
        "run.save_every=1",
        "run.threads=1",
        "run.progress=false",
        "run.plots=false",
        ENV,
        "model.preset=tiny-deepseek-v3",
        "rollout.group_size=4",
        "rollout.batch_tasks=2",
        "rollout.max_tokens=10",
        "algorithm.micro_batch_size=3",
        "optim.lr=0.01",
        *extra,
    ]


def _layout(**sizes: int) -> list[str]:
    return ["distributed.strategy=fsdp2", *(f"distributed.{k}={v}" for k, v in sizes.items())]


def _train_cli(
    args: list[str], nproc: int, *flags: str, expect_ok: bool = True
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HELPERS), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "agentgym", "train", *args, "--nproc", str(nproc), *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert (proc.returncode == 0) == expect_ok, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc


def _adapter(out: Path, step: int = 2) -> dict[str, torch.Tensor]:
    path = out / "checkpoints" / f"step_{step:06d}" / "adapter" / "adapter_model.safetensors"
    return load_file(str(path))


def _steps(out: Path) -> list[tuple[float, float, float]]:
    return [
        (r["charts/reward"], r["losses/total"], r["losses/grad_norm"])
        for r in read_jsonl(out / "metrics.jsonl")
    ]


_single: dict[str, Path] = {}


def _single_run(tmp_path_factory: Any, *extra: str) -> Path:
    """The config trained in this process (once per worker and config)."""
    key = " ".join(extra)
    if key not in _single:
        out = tmp_path_factory.mktemp("single")
        DAPOTrainer(load_config(TrainConfig, None, _args(out, *extra))).train()
        _single[key] = out
    return _single[key]


@pytest.fixture
def single_run(tmp_path_factory, toy_envs_registered) -> Path:
    return _single_run(tmp_path_factory)


def _assert_same_as_single(out: Path, single: Path, nproc: int, atol: float = 2e-5) -> None:
    ranks = [json.loads(p.read_text()) for p in sorted((out / "ranks").glob("rank*.json"))]
    assert [r["rank"] for r in ranks] == list(range(nproc))
    assert len({r["adapter_sha256"] for r in ranks}) == 1  # the same adapter on every rank
    assert ranks[0]["adapter_sha256"] != ranks[0]["initial_adapter_sha256"]  # and it moved
    got, want = _steps(out), _steps(single)
    assert len(got) == len(want) == 2
    for (r1, l1, g1), (r2, l2, g2) in zip(got, want, strict=True):
        assert r1 == pytest.approx(r2, abs=1e-9)  # the same episodes
        assert l1 == pytest.approx(l2, abs=1e-6)
        assert g1 == pytest.approx(g2, rel=1e-5)
    for step in (1, 2):
        a, b = _adapter(out, step), _adapter(single, step)
        assert a.keys() == b.keys()  # an ordinary peft adapter, every key whole
        for k in a:
            assert a[k].shape == b[k].shape, k
            torch.testing.assert_close(a[k], b[k], atol=atol, rtol=1e-4, msg=k)
    expert_keys = [k for k in _adapter(out) if "experts" in k]
    assert expert_keys  # the routed experts' LoRA is in the adapter, and it trained
    assert any(not torch.equal(_adapter(out)[k], _adapter(out, 1)[k]) for k in expert_keys)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sizes", "nproc"),
    [
        ({"ep": 2}, 2),
        ({"tp": 2}, 2),
        # 3 micro-batches a call run as windows of 2 and 1 (padded to 2): the same update;
        # tp2-pp2 runs each call's micro-batches in one schedule run
        ({"pp": 2, "pp_window": 2}, 2),
        ({"dp_shard": 2, "ep": 2}, 4),
        ({"dp_shard": 2, "tp": 2}, 4),
        ({"tp": 2, "pp": 2}, 4),
    ],
    ids=["ep2", "tp2", "pp2-window2", "dp_shard2-ep2", "dp_shard2-tp2", "tp2-pp2"],
)
def test_parallel_layout_matches_one_process(tmp_path, single_run, sizes, nproc):
    out = tmp_path / "run"
    _train_cli(_args(out, *_layout(**sizes)), nproc)
    _assert_same_as_single(out, single_run, nproc)
    steps = list(read_jsonl(out / "metrics.jsonl"))
    assert all(s["charts/logprob_mismatch_max"] < 1e-4 for s in steps)  # engine == learner


#: VAPO with its critic adapter: value pretraining, two critic steps per batch (the
#: first a critic-only step) and a clip that bites
CRITIC = (
    "algorithm.name=vapo",
    "critic.pretrain_steps=1",
    "critic.updates_per_batch=2",
    "optim.max_grad_norm=0.2",
)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sizes", "nproc"),
    [({"ep": 2}, 2), ({"tp": 2}, 2), ({"pp": 2}, 2), ({"ep": 2, "pp": 2}, 4)],
    ids=["ep2", "tp2", "pp2", "ep2-pp2"],
)
def test_a_critic_on_the_mesh_matches_one_process(
    tmp_path, tmp_path_factory, toy_envs_registered, sizes, nproc
):
    """VAPO's critic adapter and value head split with the policy (tensor-parallel LoRA,
    the head sharded by FSDP2, the critic's passes through the pipeline's stages): the
    same values, value losses, clipped critic steps and critic checkpoint as one process,
    and the same policy update."""
    single = _single_run(tmp_path_factory, *CRITIC)
    out = tmp_path / "run"
    _train_cli(_args(out, *CRITIC, *_layout(**sizes)), nproc)
    _assert_same_as_single(out, single, nproc, atol=1e-4)
    assert_same_critic(out, single, steps=(1, 2), rel=1e-4)


@pytest.mark.slow
def test_a_critic_on_the_mesh_resumes(tmp_path, tmp_path_factory, toy_envs_registered):
    """Step 1 under ep=2, pp=2, then ``--resume``: the critic's shares (FSDP2 shards, on
    the stage that holds them) come back from its checkpoint and step 2 is the
    uninterrupted one-process run's."""
    single = _single_run(tmp_path_factory, *CRITIC)
    out = tmp_path / "run"
    args = _args(out, *CRITIC, *_layout(ep=2, pp=2))
    _train_cli([*args, "run.max_steps=1"], 4)
    proc = _train_cli(args, 4, "--resume")
    assert "resumed from" in proc.stdout
    (r1, l1, g1), (r2, l2, g2) = _steps(out)[-1], _steps(single)[-1]
    assert (r1, l1) == pytest.approx((r2, l2), abs=1e-6) and g1 == pytest.approx(g2, rel=1e-4)
    b = read_jsonl(single / "metrics.jsonl")[-1]
    a = read_jsonl(out / "metrics.jsonl")[-1]
    assert a["losses/value"] == pytest.approx(b["losses/value"], abs=1e-5)


@pytest.mark.slow
def test_parallel_resume_continues_like_an_uninterrupted_run(tmp_path, single_run):
    """Step 1 under tp=2, then ``--resume`` with the same layout: the per-rank optimizer
    shards and the whole adapter are put back, and step 2 is the uninterrupted one's.
    Resuming under another layout of the same size is refused at start-up."""
    out = tmp_path / "run"
    args = _args(out, *_layout(tp=2))
    _train_cli([*args, "run.max_steps=1"], 2)
    ckpt = out / "checkpoints" / "step_000001"
    assert (ckpt / "optimizer.rank1-of-2.pt").is_file()
    proc = _train_cli(args, 2, "--resume")
    assert "resumed from" in proc.stdout
    _assert_same_as_single(out, single_run, 2)
    # the same number of processes under another layout: refused by the launcher, before
    # any rank starts, saying why
    other = _args(out, *_layout(ep=2), "run.max_steps=3")
    proc = _train_cli(other, 2, "--resume", expect_ok=False)
    assert "--resume: the checkpoints in" in proc.stderr, proc.stderr[-3000:]
    assert "resume with the same dp_shard/tp/ep/pp" in proc.stderr
    assert "launching" not in proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("sizes", "nproc"), [({"ep": 2}, 2), ({"pp": 2}, 2)], ids=["ep2", "pp2"])
def test_lora_on_a_sharded_int8_base_matches_one_process(
    tmp_path, tmp_path_factory, toy_envs_registered, sizes, nproc
):
    """``model.quantize=int8`` under a mesh: the int8 experts sliced over the expert group
    or the stages, the int8 dense weights left whole by FSDP2; equal to the one-process
    int8 run. (Adam's normalised step turns rounding in near-zero gradient entries into
    differences up to ~3e-5 here, hence the looser adapter tolerance.)"""
    pytest.importorskip("torchao", reason="model.quantize needs torchao: pip install -e '.[quant]'")
    single = _single_run(tmp_path_factory, "model.quantize=int8")
    out = tmp_path / "run"
    _train_cli(_args(out, "model.quantize=int8", *_layout(**sizes)), nproc)
    _assert_same_as_single(out, single, nproc, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize(
    ("sizes", "nproc"),
    [({"ep": 2}, 2), ({"tp": 2}, 2), ({"pp": 2}, 2)],
    ids=["ep2", "tp2", "pp2"],
)
def test_parallel_layout_on_gpus_matches_one_gpu(
    tmp_path, tmp_path_factory, toy_envs_registered, sizes, nproc
):
    """The same equalities on CUDA with NCCL (float32: no bf16 rounding between layouts)."""
    if torch.cuda.device_count() < nproc:
        pytest.skip(f"needs {nproc} CUDA devices")
    single = _single_run(tmp_path_factory, "model.device=cuda", "model.dtype=float32")
    out = tmp_path / "run"
    gpu = ["model.device=auto", "model.dtype=float32", "distributed.backend=nccl"]
    _train_cli(_args(out, *gpu, *_layout(**sizes)), nproc)
    _assert_same_as_single(out, single, nproc, atol=1e-4)


@pytest.mark.slow
def test_bf16_pipeline_computes_the_one_process_gradient(
    tmp_path, tmp_path_factory, toy_envs_registered
):
    """``model.dtype=bfloat16`` (bf16 autocast, float32 LoRA masters) through the pipeline
    schedule: the same episodes and, to bf16 rounding, the same gradient norms. (The
    adapters are not compared: Adam's first steps are about ``lr * sign(g)``, so entries
    whose gradient is near zero differ by up to ``2 lr`` under any change of rounding.)"""
    single = _single_run(tmp_path_factory, "model.dtype=bfloat16")
    out = tmp_path / "run"
    _train_cli(_args(out, "model.dtype=bfloat16", *_layout(pp=2)), 2)
    got, want = _steps(out), _steps(single)
    assert len(got) == len(want) == 2
    for (r1, _, g1), (r2, _, g2) in zip(got, want, strict=True):
        assert r1 == r2
        assert g1 == pytest.approx(g2, rel=2e-2)
