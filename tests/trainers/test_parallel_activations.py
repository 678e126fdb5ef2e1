"""Activation memory on the mesh: checkpointing, the unmerged expert LoRA, pipeline padding.

* ``distributed.activation_checkpointing`` under tensor and pipeline parallelism gives the
  one-process update (``tests/helpers/parallel_activations.py`` under torchrun, gloo),
  each layer keeping only its input (under ``tp=2`` each rank half of it, as the planner's
  sequence-parallel layer inputs count); under ``pp=2`` the mini-batch has one
  micro-batch, fewer than the stages, which the pipeline pads with a zero-loss copy;
* the routed experts' LoRA computed as ``x W + (x A) B`` equals peft's fold ``W + B A``
  and keeps no merged weight for the backward pass;
* the setting's checks.

(The planner against the saved bytes: tests/trainers/test_parallel_plan.py.)
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
import torch
from parallel_activations import build_model, loss_fn, make_samples
from test_parallel_plan import _planned, torchrun_rows

from agentgym import ConfigError
from agentgym.trainers.batch import make_microbatches
from agentgym.trainers.config import AlgorithmConfig, DistributedConfig, OptimConfig
from agentgym.trainers.learner import Learner
from agentgym.trainers.parallel.experts import expert_linear, expert_weight, find_experts

SPEC = {"batch": 2, "seq_len": 64, "micro_batches": 1}


@cache  # the same model and batch each time
def _one_process_grad_norm() -> float:
    model, tokenizer = build_model()
    algo = AlgorithmConfig(micro_batch_size=SPEC["batch"], share_prompts=False)
    learner = Learner(model, algo, OptimConfig(), pad_id=tokenizer.pad_token_id)
    samples = make_samples(SPEC, model.config.vocab_size, dp=1)
    learner.forward_backward(
        make_microbatches(samples, SPEC["batch"], tokenizer.pad_token_id), loss_fn
    )
    return learner.step()["grad_norm"]


#: the layouts checked with activation checkpointing, both of two processes
LAYOUTS = {"tp2": {"tp": 2}, "pp2-one-micro-batch": {"pp": 2}}


@pytest.fixture(scope="module")
def checkpointed_rows(tmp_path_factory) -> dict[str, list[dict]]:
    """Each layout's rows (rank order), from one launch that runs each layout in turn (a
    start-up is most of a launch's time; each layout gets a model and mesh of its own)."""
    specs = [{**SPEC, "sizes": sizes, "checkpointing": True} for sizes in LAYOUTS.values()]
    out = tmp_path_factory.mktemp("checkpointed")
    ranks = torchrun_rows("parallel_activations.py", json.dumps(specs), 2, out)
    return {name: [r["runs"][i] for r in ranks] for i, name in enumerate(LAYOUTS)}


@pytest.mark.slow
@pytest.mark.xdist_group("parallel_activations")  # the layouts' one launch, on one worker
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_checkpointed_layers_give_the_one_process_update(checkpointed_rows, layout):
    sizes, rows = LAYOUTS[layout], checkpointed_rows[layout]
    expected = _one_process_grad_norm()
    layer_input = SPEC["batch"] * SPEC["seq_len"] * 64 * 4  # tokens x hidden x fp32
    # pp=2 runs two micro-batches through 1F1B: the real one and its zero-loss copy;
    # tp=2: each rank keeps half of each layer's input
    kept = layer_input * (2 if "pp" in sizes else 1) // sizes.get("tp", 1)
    for r in rows:
        assert r["grad_norm"] == pytest.approx(expected, rel=1e-6)
        assert r["layers"] and all(v == kept for v in r["layers"].values()), r["layers"]
    if "tp" in sizes:  # the planner's layer inputs, split over tp by sequence parallelism
        _, items = _planned(sizes, batch=SPEC["batch"], sequence_parallel=True)
        assert items["activations: layer inputs"] == sum(rows[0]["layers"].values())


def _lora_experts():
    model, _ = build_model()
    with torch.no_grad():  # a non-zero adapter (B starts at zero)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.1, generator=torch.Generator().manual_seed(len(name)))
    (_, experts, wrappers), *_ = find_experts(model)
    return experts, {w.parameter_name: w for w in wrappers}


def test_unmerged_expert_lora_equals_the_fold_and_keeps_no_merged_weight():
    experts, wrappers = _lora_experts()
    x = torch.randn(5, experts.gate_up_proj.shape[-1], requires_grad=True)
    for e in range(experts.gate_up_proj.shape[0]):
        folded = x @ expert_weight(experts, wrappers, "gate_up_proj", e).T
        torch.testing.assert_close(expert_linear(x, experts, wrappers, "gate_up_proj", e), folded)
    shapes: list[torch.Size] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        base = t if t._base is None else t._base
        if not isinstance(base, torch.nn.Parameter):
            shapes.append(t.shape)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        expert_linear(x, experts, wrappers, "gate_up_proj", 0).sum().backward()
    weight_shape = experts.gate_up_proj.shape[1:]
    assert shapes and weight_shape not in shapes  # the input and x A: no [out, in] tensor
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        shapes.clear()
        (x @ expert_weight(experts, wrappers, "gate_up_proj", 0).T).sum().backward()
    assert weight_shape in shapes  # what the fold kept


def test_activation_checkpointing_setting_is_checked():
    assert DistributedConfig(strategy="fsdp2", ep=2, activation_checkpointing=True)
    with pytest.raises(ConfigError, match="device mesh"):
        DistributedConfig(strategy="fsdp2", activation_checkpointing=True)
    with pytest.raises(ConfigError, match="true or false"):
        DistributedConfig(strategy="fsdp2", ep=2, activation_checkpointing="yes")


def _activation_figures(device: str, batch: int, seq_len: int) -> dict[str, dict]:
    """One process on ``device`` in bf16: the routed experts through the expert-parallel
    forward (a one-rank group: their LoRA unmerged), each layer's saved bytes and the
    memory the forward keeps and the step's peak, with and without checkpointing."""
    import os

    import torch.distributed as dist

    made = not dist.is_initialized()
    if made:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
    try:
        return _measure(device, batch, seq_len, dist.group.WORLD)
    finally:  # the test process goes on to other tests: no group left behind
        if made:
            dist.destroy_process_group()


def _measure(device: str, batch: int, seq_len: int, group: Any) -> dict[str, dict]:
    from agentgym.trainers.parallel.activations import SavedBytes, checkpoint_layers
    from agentgym.trainers.parallel.experts import ExpertGroup, shard_experts
    from agentgym.trainers.parallel.tensor_parallel import decoder_layers

    out: dict[str, dict] = {}
    for ckpt in (False, True):
        model, _ = build_model()
        model = model.to(device=device, dtype=torch.bfloat16)
        shard_experts(model, ExpertGroup(group=group, size=1, index=0))
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(4, model.config.vocab_size, (batch, seq_len), generator=g)
        ids = ids.to(device)
        _, layers = decoder_layers(model)
        if ckpt:
            checkpoint_layers(list(layers))
        counter = SavedBytes(model, dict(enumerate(layers)))
        cuda = device == "cuda"
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated() if cuda else 0
        with counter.recording():
            logits = model(input_ids=ids).logits
        kept = (torch.cuda.memory_allocated() - start) if cuda else 0
        logits.float().logsumexp(-1).mean().backward()
        peak = (torch.cuda.max_memory_allocated() - start) if cuda else 0
        out[str(ckpt)] = {"layers": counter.per_layer, "forward_kept": kept, "peak": peak}
    return out


@pytest.mark.gpu
def test_on_a_gpu_the_planner_counts_each_layers_activations():
    """CUDA, bf16, 4 x 1024 tokens: per-layer saved bytes against the planner (whichever
    attention kernel SDPA picked for MLA), and the memory figures printed for
    docs/distributed.md (the bytes the forward keeps and the step's peak above the
    weights, from torch.cuda.memory_allocated / max_memory_allocated)."""
    from agentgym.plan import Architecture, LoraSpec
    from agentgym.plan.memory import layer_saved_elems

    batch, seq_len = 4, 1024
    figures = _activation_figures("cuda", batch, seq_len)
    model, _ = build_model()
    arch = Architecture.from_config(model.config)
    tokens, h = batch * seq_len, arch.hidden_size
    for ckpt, row in figures.items():
        print(f"checkpointing={ckpt}: {row}")
    on, off = figures["True"]["layers"], figures["False"]["layers"]
    assert all(v == tokens * h * 2 for v in on.values()), on  # each layer's bf16 input
    gaps = {}
    for flash in (True, False):
        shape = {"seq_len": seq_len, "flash_attention": flash, "act_bytes": 2.0}
        planned = sum(
            (h + layer_saved_elems(arch, i, LoraSpec(r=8), **shape)) * tokens * 2 for i in off
        )
        gaps[flash] = planned / sum(off.values()) - 1
    print(f"planned / measured - 1 without checkpointing (flash_attention: gap): {gaps}")
    assert min(abs(g) for g in gaps.values()) < 0.10
