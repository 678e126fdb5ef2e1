"""The planner against what each rank of the trainer's mesh holds and saves.

``tests/helpers/parallel_bytes.py`` builds the mesh learner on the tiny DeepSeek-V3 under
a layout (gloo, ranks forked by ``agentgym.cli.local_ranks``) and writes each rank's bytes of frozen base and of adapter;
``plan_lora`` is asked for the same layout in its own terms (``Layout.planner_sizes``,
FSDP2 as ZeRO-3 for the adapter and ``shard_base`` for the frozen base, fp32 everywhere)
and must give the same per-GPU figures for the pipeline stage it names as the worst.
Under ``ep=2`` (two data-parallel groups) FSDP2 shards the dense base over both; its
shards of small tensors are uneven (dim 0 rounded up on the first rank), so there the
base line agrees to 5%.

The same rows check the dry run (``agentgym train --dry-run``, trainers/dry_run/): one rank
of each layout run in this process on fake tensors must hold exactly the bytes the real
rank holds: frozen base, adapter, gradients, optimizer state, and what each decoder layer
saves for the backward pass (activation checkpointing on), under ``ep=2``, ``tp=2``,
``dp_shard=2 x tp=2`` (FSDP2 over the tensor-parallel DTensors) and ``dp_shard=2 x ep=2``.

``tests/helpers/parallel_activations.py`` runs one forward and backward on the same model
under a layout and counts, per decoder layer, the bytes autograd saves for the backward
pass (``saved_tensors_hooks``); the planner's "activations: layer inputs" line for the same
layout (no pipeline: one micro-batch in flight) must be within 10% of it, with and
without activation checkpointing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym.plan import (
    GIB,
    Architecture,
    Hardware,
    LoraSpec,
    ParallelSpec,
    TrainSpec,
    plan_lora,
)
from agentgym.trainers.parallel import Layout

HELPERS = Path(__file__).resolve().parents[1] / "helpers"


def torchrun_rows(script: str, arg: str, nproc: int, out: Path) -> list[dict]:
    """Run a helper on ``nproc`` ranks (forked by agentgym's one-node launcher, with
    torchrun's variables); each rank's JSON row."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HELPERS), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"  # what torchrun gives a rank (and forking needs)
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "agentgym.cli.local_ranks", str(nproc)]
    cmd += [str(HELPERS / script), arg]
    proc = subprocess.run([*cmd, str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    rows = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    assert sorted(r["rank"] for r in rows) == list(range(nproc))
    return rows


#: the layouts whose per-rank bytes are checked, all of two processes
LAYOUTS = {"tp2": {"tp": 2}, "pp2": {"pp": 2}, "ep2": {"ep": 2}}


#: the 4-process layouts whose bytes the dry run predicts
LAYOUTS_4 = {"dp_shard2-tp2": {"dp_shard": 2, "tp": 2}, "dp_shard2-ep2": {"dp_shard": 2, "ep": 2}}


def _launch_rows(tmp_path_factory, layouts: dict[str, dict[str, int]]) -> dict[str, list[dict]]:
    """Each layout's rows (rank order), from one launch that builds each layout in turn
    (a start-up is most of a launch's time; each layout gets a model and mesh of its own)."""
    nproc = {Layout(**sizes).world_size for sizes in layouts.values()}.pop()
    out = tmp_path_factory.mktemp("rank_bytes")
    ranks = torchrun_rows("parallel_bytes.py", json.dumps(list(layouts.values())), nproc, out)
    return {name: [r["runs"][i] for r in ranks] for i, name in enumerate(layouts)}


@pytest.fixture(scope="module")
def rank_bytes(tmp_path_factory) -> dict[str, list[dict[str, int]]]:
    return _launch_rows(tmp_path_factory, LAYOUTS)


@pytest.fixture(scope="module")
def rank_bytes_4(tmp_path_factory) -> dict[str, list[dict[str, int]]]:
    return _launch_rows(tmp_path_factory, LAYOUTS_4)


def _planned(
    sizes: dict[str, int],
    *,
    batch: int = 1,
    seq_len: int = 64,
    checkpointing: bool = True,
    sequence_parallel: bool = False,
) -> tuple[int, dict[str, float]]:
    from agentgym.generation import build_preset, build_tokenizer

    layout = Layout(**sizes)
    arch = Architecture.from_config(build_preset("tiny-deepseek-v3", build_tokenizer()).config)
    plan = plan_lora(
        arch,
        lora=LoraSpec(r=8),  # apply_lora's defaults: every attention projection + experts
        parallel=ParallelSpec(
            **layout.planner_sizes(),
            zero_stage=3,
            sequence_parallel=sequence_parallel,
            shard_base=True,
        ),
        base_dtype="fp32",
        train=TrainSpec(
            micro_batch_size=batch,
            seq_len=seq_len,
            activation_checkpointing=checkpointing,
            activation_dtype="fp32",
            lora_dtype="fp32",
            grad_dtype="fp32",
            flash_attention=False,  # CPU SDPA materialises MLA's probabilities
        ),
        rollout=None,
        hardware=Hardware(gpus=layout.world_size, gpu_mem_gib=1.0),
        overheads=False,
    )
    return plan.stage, {i.name: i.gib * GIB for i in plan.items}


@pytest.mark.slow
@pytest.mark.xdist_group("parallel_plan_bytes")  # the layouts' one launch, on one worker
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_planner_sizes_each_ranks_weights_and_adapter(rank_bytes, layout):
    sizes, rows = LAYOUTS[layout], rank_bytes[layout]
    stage, items = _planned(sizes)
    worst = [r for r in rows if r["stage"] == stage]
    assert worst
    for r in worst:
        assert r["lora"] == pytest.approx(items["LoRA params"], rel=1e-9)
        if "ep" in sizes:  # FSDP2 also shards the frozen dense base over the 2 groups
            assert r["base"] == pytest.approx(items["base weights"], rel=0.05)
        else:
            assert r["base"] == pytest.approx(items["base weights"], rel=1e-9)
    # and the stage the planner names is the one holding the most
    assert max(r["base"] + r["lora"] for r in rows) == max(r["base"] + r["lora"] for r in worst)


@pytest.mark.slow
def test_the_planner_counts_the_activations_each_layer_saves(tmp_path):
    """ep=2 (the routed experts through the all-to-all, their LoRA unmerged): the bytes
    each rank's layers save, without checkpointing and with it, against the planner."""
    sizes, batch, seq_len = {"ep": 2}, 2, 64
    hidden = 64  # tiny-deepseek-v3
    measured: dict[bool, list[dict]] = {}
    both = (False, True)  # one launch measures both, each on a model of its own
    specs = [{"sizes": sizes, "checkpointing": c, "batch": batch, "seq_len": seq_len} for c in both]
    ranks = torchrun_rows("parallel_activations.py", json.dumps(specs), 2, tmp_path)
    for i, ckpt in enumerate(both):
        rows = [r["runs"][i] for r in ranks]
        _, items = _planned(sizes, batch=batch, seq_len=seq_len, checkpointing=ckpt)
        planned = items["activations: layer inputs"]
        for r in rows:
            assert r["tokens"] == batch * seq_len
            saved = sum(r["layers"].values())
            assert planned == pytest.approx(saved, rel=0.10), (ckpt, planned, r["layers"])
        measured[ckpt] = rows
    # checkpointing keeps each layer's input alone, and changes nothing in the update
    for off, on in zip(measured[False], measured[True], strict=True):
        assert list(on["layers"].values()) == [batch * seq_len * hidden * 4] * 2
        assert sum(on["layers"].values()) < sum(off["layers"].values()) / 10
        assert on["grad_norm"] == pytest.approx(off["grad_norm"], rel=1e-6)


def _dry_run(sizes: dict[str, int], rank: int):
    """Rank ``rank`` of the helper's run, dry (fake tensors, this process): its figures."""
    from parallel_bytes import BATCH, SEQ_LEN

    from agentgym import load_config
    from agentgym.trainers import TrainConfig, dry_run_rank

    over = [
        "model.preset=tiny-deepseek-v3", "model.dtype=float32", "lora.r=8",
        f"algorithm.micro_batch_size={BATCH}", "distributed.strategy=fsdp2",
        "distributed.activation_checkpointing=true",
        *(f"distributed.{k}={v}" for k, v in sizes.items()),
    ]  # fmt: skip
    cfg = load_config(TrainConfig, None, over)
    # the CPU's own attention kernel, as the real CPU run has it
    return dry_run_rank(
        cfg, rank, seq_len=SEQ_LEN, prompt_tokens=SEQ_LEN // 2, gpu_kernels=False, say=str
    )


def _assert_predicted(rows: list[dict], sizes: dict[str, int]) -> None:
    for row in rows:
        f = _dry_run(sizes, row["rank"])
        assert (f.base, f.adapter) == (row["share"]["base"], row["share"]["adapter"]), row
        assert f.grads == row["grads"] and f.optimizer == row["optimizer"], row
        saved = {int(k): v for k, v in row["saved"].items()}
        assert f.saved_per_layer == saved, (f.saved_per_layer, saved)


@pytest.mark.slow
@pytest.mark.xdist_group("parallel_plan_bytes")
@pytest.mark.parametrize("layout", ["ep2", "tp2"])
def test_the_dry_run_predicts_each_ranks_bytes(rank_bytes, layout):
    _assert_predicted(rank_bytes[layout], LAYOUTS[layout])


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS_4))
def test_the_dry_run_predicts_each_ranks_bytes_on_four_ranks(rank_bytes_4, layout):
    """FSDP2 over the tensor-parallel DTensors, and the expert group of ep x tp with
    dp_shard 2: what every rank holds, predicted by the dry run of that rank."""
    _assert_predicted(rank_bytes_4[layout], LAYOUTS_4[layout])
