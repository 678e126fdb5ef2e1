"""The memory planner: parameter counts, the 671B layout, and estimates against measurement.

Measured peak memory (``measure_peak_bytes``): a LoRA training step on CPU (forward with
activation checkpointing, backward, AdamW step) runs under ``torch.profiler`` with
``profile_memory=True``; the profiler records every CPU allocation and free of torch's
allocator as ``[memory]`` events with signed byte counts. Their running sum, in time
order, peaks at the step's largest extra allocation; the weights, buffers and optimizer
state already allocated before the step (a warm-up step creates the Adam moments) are
added as the baseline. The planner is asked for the same quantity: its train-phase total
with fp32 everywhere, no parallelism, no rollout engine and no per-GPU constants.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agentgym import ConfigError, UnknownNameError, load_config
from agentgym.plan import (
    GIB,
    Architecture,
    Hardware,
    LoraSpec,
    ParallelSpec,
    PlanInputs,
    TrainSpec,
    count_lora_parameters,
    count_parameters,
    plan_both,
    plan_inputs,
    plan_lora,
)
from agentgym.trainers import TrainConfig
from agentgym.trainers.config import LoraSettings

ROOT = Path(__file__).resolve().parents[2]
CONFIG_671B = ROOT / "configs" / "deepseek_v3_671b_48xh100.yaml"


def inputs_671b(*overrides: str, **hardware) -> PlanInputs:
    """The 671B config as the trainer loads it, with ``section.key=value`` overrides."""
    return plan_inputs(load_config(TrainConfig, CONFIG_671B, list(overrides)), **hardware)


def write_671b(tmp_path: Path, edit) -> Path:
    """A copy of the 671B YAML after ``edit(raw_dict)``."""
    raw = yaml.safe_load(CONFIG_671B.read_text())
    edit(raw)
    path = tmp_path / "edited.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


# --------------------------------------------------------------------------- counting


def test_dense_count_by_hand() -> None:
    arch = Architecture.from_config(
        {
            "model_type": "qwen2",
            "hidden_size": 8,
            "num_hidden_layers": 2,
            "vocab_size": 10,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "intermediate_size": 16,
            "tie_word_embeddings": True,
        }
    )
    # per layer: q 8*8+8, k 8*4+4, v 8*4+4, o 8*8 (no bias), mlp 3*8*16, norms 2*8
    layer = 72 + 36 + 36 + 64 + 384 + 16
    assert count_parameters(arch).total == 10 * 8 + 2 * layer + 8  # tied head, final norm
    lora = LoraSpec(r=2, target_modules=("q_proj", "down_proj"))
    assert count_lora_parameters(arch, lora) == 2 * (2 * (8 + 8) + 2 * (16 + 8))


def test_moe_count_by_hand() -> None:
    arch = Architecture.from_config(
        {
            "hidden_size": 4,
            "num_hidden_layers": 2,
            "vocab_size": 10,
            "num_attention_heads": 2,
            "intermediate_size": 6,
            "moe_intermediate_size": 2,
            "n_routed_experts": 3,
            "n_shared_experts": 1,
            "num_experts_per_tok": 2,
            "first_k_dense_replace": 1,
            "q_lora_rank": 3,
            "kv_lora_rank": 2,
            "qk_nope_head_dim": 1,
            "qk_rope_head_dim": 1,
            "v_head_dim": 1,
        }
    )
    # MLA: q_a 4*3, q_b 3*(2*2), kv_a 4*(2+1), kv_b 2*(2*(1+1)), o 2*4; norms 4+4+3+2
    attention = 12 + 12 + 12 + 8 + 8
    norms = 13
    dense_mlp = 3 * 4 * 6
    expert = 3 * 4 * 2  # gate, up, down of one expert
    moe = 3 * expert + expert + 3 * 4  # routed, shared, router
    counts = count_parameters(arch)
    assert counts.total == 2 * 10 * 4 + 4 + 2 * (attention + norms) + dense_mlp + moe
    # per token only 2 of the 3 routed experts are active
    assert counts.total - counts.activated == expert
    lora = LoraSpec(r=1, target_modules=None, target_experts=True)
    # q_a, q_b, kv_a, o (kv_b is not a default target: vLLM folds it into its decode)
    attn_lora = (4 + 3) + (3 + 4) + (4 + 3) + (2 + 4)
    assert count_lora_parameters(arch, lora) == 2 * attn_lora + 3 * ((4 + 4) + (2 + 4))


@pytest.fixture(scope="module")
def tiny_models():
    pytest.importorskip("transformers")
    from agentgym.generation import build_preset, build_tokenizer

    tokenizer = build_tokenizer()
    return {name: build_preset(name, tokenizer) for name in ("tiny-qwen2", "tiny-deepseek-v3")}


@pytest.mark.parametrize("name", ["tiny-qwen2", "tiny-deepseek-v3"])
def test_counts_match_real_models(tiny_models, name: str) -> None:
    from agentgym.trainers.models import apply_lora

    model = tiny_models[name]
    arch = Architecture.from_config(model.config)
    assert count_parameters(arch).total == sum(p.numel() for p in model.parameters())
    import copy

    peft_model = apply_lora(copy.deepcopy(model), LoraSettings(r=4))
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert count_lora_parameters(arch, LoraSpec(r=4)) == trainable


def test_deepseek_v3_is_671b_with_37b_activated() -> None:
    arch = inputs_671b().arch
    counts = count_parameters(arch)
    assert counts.total == pytest.approx(671e9, rel=0.01)
    assert counts.activated == pytest.approx(37e9, rel=0.03)
    assert counts.by_group["experts"] > 0.95 * counts.total


# --------------------------------------------------------------------------- the 671B plan


def test_671b_lora_fits_with_its_pipeline_window() -> None:
    """One optimizer step trains 512 sequences (256 episodes x 2 conversations): 256
    micro-batches per data-parallel rank. In one run of the schedule PyTorch's stage
    allocates a receive buffer for each (two on the middle stages: 56 GiB) and it does not
    fit; the config's distributed.pp_window: 48 runs them 48 at a time, and it fits (as do
    two updates per batch in one run each)."""
    config = inputs_671b()
    assert config.hardware.gpus == 48 and config.hardware.gpu_mem_gib == 80
    assert config.train.pipeline_window == 48 and config.train.micro_batches(6, 2) == 48
    lora, full = plan_both(config)
    assert lora.fits and lora.total_gib <= 80 and lora.headroom_gib > 0
    one_run, _ = plan_both(inputs_671b("distributed.pp_window=0"))
    assert not one_run.fits and one_run.stage in (1, 2, 3, 4)
    buffers = 2 * 256 * 8192 * 7168 * 2 / GIB  # activations and gradients, [T, h] bf16
    assert one_run.item("pipeline: receive buffers") == pytest.approx(buffers)
    assert lora.item("pipeline: receive buffers") <= 2 * 48 * 8192 * 7168 * 2 / GIB
    halved, _ = plan_both(inputs_671b("distributed.pp_window=0", "algorithm.updates_per_batch=2"))
    assert halved.fits and halved.total_gib <= 80 and halved.headroom_gib > 0
    assert not full.fits and full.total_gib > 80
    # full fine-tune states alone: 16 bytes per parameter over 48 GPUs
    states = full.item("base weights") + full.item("optimizer states") + full.item("gradients")
    assert states == pytest.approx(16 * count_parameters(config.arch).total / 48 / GIB)
    # fp8 base: about one byte per parameter of the stage, well under the bf16 size
    assert 10 < lora.item("base weights") < 20


def test_pipeline_buffers_and_stage_outputs_by_stage() -> None:
    from agentgym.plan.memory import pipeline_bytes

    one = 8192 * 7168 * 2.0  # [T, h] in bf16
    shape = {"stages": 6, "tokens": 8192, "hidden": 7168, "act_bytes": 2.0}
    # first stage: gradient buffers for every micro-batch, its outputs for those in flight
    assert pipeline_bytes(stage=0, micro_batches=6, **shape) == (6 * one, 6 * one)
    # a middle stage receives activations and gradients; 1F1B keeps pp - s in flight
    assert pipeline_bytes(stage=3, micro_batches=10, **shape) == (20 * one, 3 * one)
    # the last stage hands its logits to the loss: nothing kept, activations received
    assert pipeline_bytes(stage=5, micro_batches=10, **shape) == (10 * one, 0.0)
    assert pipeline_bytes(
        stage=0, stages=1, micro_batches=4, tokens=8, hidden=4, act_bytes=2.0
    ) == (
        0.0,
        0.0,
    )
    # a call runs at least pp micro-batches (the trainer pads a smaller one)
    assert TrainSpec(micro_batch_size=1).micro_batches(6, 2) == 6
    assert TrainSpec(micro_batch_size=2, update_sequences=512).micro_batches(6, 2) == 128


def test_tensor_parallelism_splits_heads_and_experts_not_the_hidden_width() -> None:
    from agentgym.plan.memory import layer_activation_elems, layer_saved_elems

    inp = inputs_671b()
    shape = {"seq_len": 8192, "act_bytes": 2.0}
    for index in (0, 3):  # a dense layer, a MoE layer
        whole = layer_activation_elems(inp.arch, index, inp.lora, **shape)
        split = layer_activation_elems(inp.arch, index, inp.lora, tp=4, **shape)
        assert whole / 4 < split < whole
        saved = layer_saved_elems(inp.arch, index, inp.lora, **shape)
        # at least the two norms' fp32 copies of the hidden states stay whole on each rank
        h = inp.arch.hidden_size
        assert layer_saved_elems(inp.arch, index, inp.lora, tp=4, **shape) > saved / 4 + 2 * h


def test_the_stage_plan_counts_what_the_671b_dry_run_measured() -> None:
    """Stage 0 of the 671B config for the dry run's call (6 micro-batches): the pieces the
    dry run found live at its peak (docs/plan.md), sized as the planner sizes them."""
    from agentgym.plan.dry_run import _stage_plan

    plan = _stage_plan(inputs_671b(), 0, 6)
    one = 8192 * 7168 * 2 / GIB
    assert plan.item("pipeline: receive buffers") == pytest.approx(6 * one)
    assert plan.item("pipeline: stage outputs") == pytest.approx(6 * one)
    assert plan.item("attention masks") == pytest.approx((6 + 2) * 8192**2 / GIB)
    # FSDP2's all-gathered bf16 base of the stage (embedding and 11 layers' dense
    # weights): 2.3677 GiB of all-gather outputs live at the dry run's peak
    assert plan.item("FSDP2 gathered base") == pytest.approx(2.3677, rel=1e-3)
    # the last stage's loss: bf16 logits of its vocabulary slice and 5 fp32 copies, while
    # FSDP2 holds only the root (head, final norm) gathered, not the layers
    last = _stage_plan(inputs_671b(), 5, 6)
    vocab = 129280 / 4
    head = 8192 * vocab * (2 + 5 * 4) / GIB
    root = (vocab * 7168 + 7168) * 2 / GIB
    freed = last.item("FSDP2 gathered base") - root
    assert last.item("activations: working set") == pytest.approx(head - freed)
    # the config's own runs: 48 micro-batches (pp_window) of its 256 per data-parallel
    # rank; without the window, all 256 in one run
    assert _stage_plan(inputs_671b(), 0).item("pipeline: receive buffers") == pytest.approx(
        48 * one
    )
    one_run = _stage_plan(inputs_671b("distributed.pp_window=0"), 0)
    assert one_run.item("pipeline: receive buffers") == pytest.approx(256 * one)


def test_rollout_kv_cache_is_mla_latent() -> None:
    config = inputs_671b()
    lora, _ = plan_both(config)
    r = config.rollout
    layers = 10  # the heaviest rollout stage of 61 layers over pp=6 (11 of them hold 3 dense)
    per_token_layer = (512 + 64) * 2  # compressed latent + rope key, bf16, on every TP rank
    expected = r.max_num_seqs * r.max_model_len * layers * per_token_layer / GIB
    assert lora.item("rollout KV cache") == pytest.approx(expected)


def test_small_gpus_do_not_fit_but_are_reported() -> None:
    config = inputs_671b(gpu_mem_gib=40)
    lora, full = plan_both(config)
    assert not lora.fits and not full.fits


def test_sleep_mode_off_keeps_engine_memory_in_training() -> None:
    lora, _ = plan_both(inputs_671b("rollout.engine_options.enable_sleep_mode=false"))
    asleep, _ = plan_both(inputs_671b())
    assert lora.train_gib > asleep.train_gib + 30


def test_bad_layouts_are_config_errors(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"change plan\.parallel\.dp"):
        plan_both(inputs_671b("plan.gpus=64"))  # 4 x 6 x 2 = 48 GPUs, not 64
    # the planner's sizes must agree with the trainer's own layout (distributed:)
    with pytest.raises(ConfigError, match=r"is not the trainer's layout"):
        plan_both(inputs_671b("plan.parallel.dp=4"))
    with pytest.raises(ConfigError, match="must divide"):
        inputs_671b("plan.parallel.ep=3")
    path = write_671b(tmp_path, lambda raw: raw["lora"].update(target_module=["o_proj"]))
    with pytest.raises(UnknownNameError, match="Did you mean"):
        load_config(TrainConfig, path)
    path = write_671b(tmp_path, lambda raw: raw["model"]["architecture"].pop("hidden_size"))
    with pytest.raises(ConfigError, match="hidden_size"):
        plan_inputs(load_config(TrainConfig, path))


# --------------------------------------------------------------------------- vs measurement


def measure_peak_bytes(model, *, batch: int, seq_len: int, r: int) -> int:
    """Peak bytes of one LoRA training step on CPU (see the module docstring)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from agentgym.trainers.models import apply_lora

    model.config.use_cache = False
    peft_model = apply_lora(model, LoraSettings(r=r))
    peft_model.train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    params = [p for p in peft_model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    ids = torch.randint(
        3, model.config.vocab_size, (batch, seq_len), generator=torch.Generator().manual_seed(0)
    )

    def step() -> None:
        peft_model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # creates the Adam moments
    tensors = [*peft_model.parameters(), *peft_model.buffers()]
    tensors += [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    baseline = sum(t.numel() * t.element_size() for t in tensors)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    current = peak = 0
    for e in events:
        current += e.nbytes()
        peak = max(peak, current)
    assert peak > 0, "the profiler recorded no allocations"
    return baseline + peak


@pytest.mark.parametrize(
    ("name", "batch", "seq_len"),
    [("tiny-qwen2", 4, 256), ("tiny-deepseek-v3", 2, 384)],
)
def test_planner_matches_measured_peak(name: str, batch: int, seq_len: int) -> None:
    pytest.importorskip("torch")
    from agentgym.generation import build_preset, build_tokenizer

    model = build_preset(name, build_tokenizer())
    arch = Architecture.from_config(model.config)
    r = 8
    measured = measure_peak_bytes(model, batch=batch, seq_len=seq_len, r=r)
    plan = plan_lora(
        arch,
        lora=LoraSpec(r=r),  # apply_lora's defaults: every attention projection + experts
        parallel=ParallelSpec(),
        base_dtype="fp32",
        train=TrainSpec(
            micro_batch_size=batch,
            seq_len=seq_len,
            activation_dtype="fp32",
            lora_dtype="fp32",
            grad_dtype="fp32",
            # CPU SDPA has no fused kernel when v_head_dim != qk_head_dim (MLA): the
            # probabilities are materialised there, and the planner is told so
            flash_attention=arch.attention == "gqa",
        ),
        rollout=None,
        hardware=Hardware(gpus=1, gpu_mem_gib=1.0),
        overheads=False,
    )
    estimate = plan.train_gib * GIB
    assert estimate == pytest.approx(measured, rel=0.25), (estimate / 1e6, measured / 1e6)


# --------------------------------------------------------------------------- CLI


def test_cli_plan_prints_fit_and_non_fit(capsys) -> None:
    from agentgym.cli import main

    assert main(["plan", str(CONFIG_671B), "algorithm.updates_per_batch=2"]) == 0
    out = capsys.readouterr().out
    assert "LoRA: FITS" in out and "Full fine-tune: DOES NOT FIT" in out
    assert "rollout KV cache" in out and "Assumptions:" in out


def test_cli_plan_json_and_overrides(capsys) -> None:
    from agentgym.cli import main

    assert main(["plan", str(CONFIG_671B), "--json", "--gpus", "96", "--gpu-mem", "24"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lora"]["layout"]["dp"] == 4 and data["lora"]["gpu_mem_gib"] == 24
    assert data["lora"]["fits"] is False and data["full"]["fits"] is False


def test_cli_plan_errors_say_what_to_fix(tmp_path, capsys) -> None:
    from agentgym.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {path: /x}\nplan: {gpus: 1}\n")
    assert main(["plan", str(bad)]) == 2
    assert "model.architecture" in capsys.readouterr().err
    assert main(["plan", str(tmp_path / "missing.yaml")]) == 2
    assert main(["plan", str(CONFIG_671B), "--gpus", "50"]) == 2
    assert "multiple" in capsys.readouterr().err
