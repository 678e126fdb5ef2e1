"""One config for ``agentgym plan`` and ``agentgym train``: the ``plan:`` section and how the
planner reads the trainer's sections (model, lora, algorithm, rollout engine options)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agentgym import ConfigError, UnknownNameError, config_from_dict, load_config
from agentgym.plan import (
    Architecture,
    PlanConfig,
    PlanSettings,
    count_parameters,
    plan_both,
    plan_inputs,
    plan_settings,
)
from agentgym.trainers import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
CONFIG_671B = ROOT / "configs" / "deepseek_v3_671b_48xh100.yaml"

#: per-GPU GiB of the 671B plan, as `agentgym plan` printed them before the planner read
#: the trainer's config (the planner's own YAML shape then); the LoRA column
#: since the config stopped adapting kv_b_proj (vLLM folds it into its MLA decode) and
#: since FSDP2's sharding of the frozen base's bf16 tensors over dp is counted (issue 32),
#: and since the config's plan.lora_dtype says what the trainer keeps (fp32: its adapter
#: is its own master copy, measured by the dry run, issue 41; it was bf16 + an fp32
#: master: 26.198 / 61.029), and since the training step's peak counts what the 671B dry
#: run measured beside the planner (issue 41, docs/plan.md): the pipeline's receive buffers
#: for the 256 micro-batches a data-parallel rank runs in one call, the stage outputs in
#: flight, the attention masks, FSDP2's gathered base and the hidden-width values TP does
#: not split (it was 25.983 / 60.814, stage 5; then 86.831 / 62.963, stage 1, the 256
#: micro-batches in one run), and since the config's distributed.pp_window: 48 runs them
#: 48 at a time (stage 5 the worst again: its rollout phase)
BEFORE = {
    "lora": {"train": 34.31764826476574, "rollout": 60.814001861214635, "peak": 60.814001861214635},
    "full": {"train": 274.8276040712992, "rollout": 260.63516757488253, "peak": 274.8276040712992},
}

TINY_ARCH = {
    "model_type": "qwen2",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "vocab_size": 100,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 512,
}


def tiny_config(**sections) -> PlanConfig:
    """A small planned config: a dense model, 2 GPUs, the given sections on top."""
    data = {
        "model": {"path": "/nonexistent", "architecture": TINY_ARCH},
        "plan": {"gpus": 2, "gpu_mem_gib": 24, "parallel": {"dp": 2}},
    }
    data.update(sections)
    return _load(data)


def _load(data: dict) -> PlanConfig:
    """A trainer config from a dict, as the loader builds it from YAML."""
    return config_from_dict(PlanConfig, data)


# --------------------------------------------------------------------------- both commands


def test_train_print_config_accepts_the_671b_config(capsys) -> None:
    from agentgym.cli import main

    assert main(["train", str(CONFIG_671B), "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["plan"]["gpus"] == 48 and printed["plan"]["parallel"]["tp"] == 4
    assert printed["rollout"]["engine_options"]["tensor_parallel_size"] == 8
    assert printed["model"]["architecture"]["n_routed_experts"] == 256


def test_plan_gives_the_same_per_gpu_totals_as_before(tmp_path, capsys) -> None:
    from agentgym.cli import main

    lora, full = plan_both(plan_inputs(load_config(PlanConfig, CONFIG_671B)))
    for plan, want in ((lora, BEFORE["lora"]), (full, BEFORE["full"])):
        assert plan.train_gib == pytest.approx(want["train"], rel=1e-12)
        assert plan.rollout_gib == pytest.approx(want["rollout"], rel=1e-12)
        assert plan.total_gib == pytest.approx(want["peak"], rel=1e-12)
    # what --print-config prints is itself a config both commands read, with equal numbers
    assert main(["train", str(CONFIG_671B), "--print-config"]) == 0
    printed = tmp_path / "printed.yaml"
    printed.write_text(capsys.readouterr().out)
    assert main(["plan", str(printed), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lora"]["total_gib"] == pytest.approx(BEFORE["lora"]["peak"], rel=1e-12)
    assert data["full"]["total_gib"] == pytest.approx(BEFORE["full"]["peak"], rel=1e-12)


def test_unknown_key_in_plan_section_says_did_you_mean(tmp_path, capsys) -> None:
    from agentgym.cli import main

    raw = yaml.safe_load(CONFIG_671B.read_text())
    raw["plan"]["gpu_mem"] = raw["plan"].pop("gpu_mem_gib")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(UnknownNameError, match=r"Did you mean.*plan\.gpu_mem_gib"):
        load_config(PlanConfig, bad)
    for command in (["plan", str(bad)], ["train", str(bad), "--print-config"]):
        assert main(command) == 2
        assert "plan.gpu_mem_gib" in capsys.readouterr().err
    # the same through an override, and one level down
    with pytest.raises(UnknownNameError, match=r"plan\.parallel\.tp"):
        load_config(PlanConfig, CONFIG_671B, ["plan.parallel.tpp=8"])


def test_plan_overrides_work_as_in_train(capsys) -> None:
    from agentgym.cli import main

    assert main(["plan", str(CONFIG_671B), "plan.gpu_mem_gib=40", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lora"]["gpu_mem_gib"] == 40 and data["lora"]["fits"] is False
    more = "rollout.engine_options.max_num_seqs=512"
    assert main(["plan", str(CONFIG_671B), more, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lora"]["layout"]["rollout"]["max_num_seqs"] == 512
    assert data["lora"]["fits"] is False and data["lora"]["warnings"]


def test_config_without_plan_section_says_what_to_add(capsys) -> None:
    from agentgym.cli import main

    assert PlanSettings().planned is False
    with pytest.raises(ConfigError, match=r"plan\.gpus"):
        plan_inputs(PlanConfig())
    with pytest.raises(ConfigError, match=r"plan\.gpus"):
        plan_inputs(TrainConfig())
    assert main(["plan", str(ROOT / "configs" / "quickstart_dapo.yaml")]) == 2
    err = capsys.readouterr().err
    assert "plan:" in err and "parallel" in err


def test_the_trainer_keeps_the_plan_section_as_written_and_the_planner_reads_it() -> None:
    """TrainConfig (the trainer's layer, below the planner) holds ``plan:`` as a mapping;
    the planner types it, with the same checks and the same plans as PlanConfig's."""
    raw = load_config(TrainConfig, CONFIG_671B)
    typed = load_config(PlanConfig, CONFIG_671B)
    assert isinstance(raw.plan, dict) and raw.plan["gpus"] == 48
    assert isinstance(typed, TrainConfig) and plan_settings(raw) == typed.plan
    assert plan_inputs(raw) == plan_inputs(typed)
    bad = load_config(TrainConfig, None, ["plan.workload.prompt_tokens=-1"])
    with pytest.raises(ConfigError, match=r"plan\.workload\.prompt_tokens"):
        plan_settings(bad)
    with pytest.raises(UnknownNameError, match=r"plan\.parallel\.tp"):
        plan_inputs(load_config(TrainConfig, CONFIG_671B, ["plan.parallel.tpp=8"]))


def test_plan_section_is_checked_when_the_config_loads() -> None:
    with pytest.raises(UnknownNameError, match="Did you mean"):
        load_config(PlanConfig, None, ["plan.base_weights=fp9"])
    with pytest.raises(ConfigError, match=r"plan\.activation_checkpointing"):
        load_config(PlanConfig, None, ["plan.activation_checkpointing=false"])
    with pytest.raises(ConfigError, match=r"plan\.gpus"):
        load_config(PlanConfig, None, ["plan.gpus=-1"])


# --------------------------------------------------------------------------- the trainer's sections


def test_model_shape_comes_from_config_json_in_model_path(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY_ARCH))
    cfg = _load({"model": {"path": str(tmp_path)}, "plan": {"gpus": 1}})
    inputs = plan_inputs(cfg)
    assert inputs.arch == Architecture.from_config(TINY_ARCH)
    assert count_parameters(inputs.arch).total > 0
    missing = _load({"model": {"path": str(tmp_path / "nowhere")}, "plan": {"gpus": 1}})
    with pytest.raises(ConfigError, match=r"model\.architecture"):
        plan_inputs(missing)


def test_lora_and_micro_batch_come_from_the_trainer_sections() -> None:
    cfg = tiny_config(
        lora={"r": 4, "target_modules": ["q_proj", "v_proj"]},
        algorithm={"micro_batch_size": 3},
    )
    inputs = plan_inputs(cfg)
    assert inputs.lora.r == 4 and inputs.lora.target_modules == ("q_proj", "v_proj")
    assert inputs.train.micro_batch_size == 3
    assert inputs.parallel.dp == 2 and inputs.hardware.gpu_mem_gib == 24


def test_rollout_layout_comes_from_vllm_engine_options() -> None:
    options = {
        "tensor_parallel_size": 2,
        "data_parallel_size": 1,
        "max_num_seqs": 16,
        "gpu_memory_utilization": 0.4,
    }
    cfg = tiny_config(rollout={"engine": "vllm", "engine_options": options})
    r = plan_inputs(cfg).rollout
    assert (r.tp, r.pp, r.dp, r.ep) == (2, 1, 1, 2)  # experts sliced over TP without EP
    assert r.max_num_seqs == 16 and r.gpu_memory_utilization == 0.4
    assert r.max_model_len == TINY_ARCH["max_position_embeddings"]  # vLLM's default
    assert r.sleep_level == 1 and r.kv_cache_dtype == "bf16"
    options = {**options, "enable_sleep_mode": False, "kv_cache_dtype": "fp8_e5m2"}
    r = plan_inputs(tiny_config(rollout={"engine": "vllm", "engine_options": options})).rollout
    assert r.sleep_level == 0 and r.kv_cache_dtype == "fp8"


def test_rollout_engine_that_is_not_counted_is_said_so() -> None:
    lora, _ = plan_both(plan_inputs(tiny_config()))  # the default engine: hf
    assert lora.item("rollout KV cache") == 0
    assert any("rollout.engine is 'hf'" in a for a in lora.assumptions)
    options = {"colocated": False, "max_num_seqs": 8}
    inputs = plan_inputs(tiny_config(rollout={"engine": "vllm", "engine_options": options}))
    assert inputs.rollout is None and "colocated is false" in inputs.notes[0]


def test_rollout_needs_max_num_seqs_and_a_matching_gpu_count() -> None:
    cfg = tiny_config(rollout={"engine": "vllm", "engine_options": {}})
    with pytest.raises(ConfigError, match="max_num_seqs"):
        plan_inputs(cfg)
    options = {"tensor_parallel_size": 4, "max_num_seqs": 8}
    inputs = plan_inputs(tiny_config(rollout={"engine": "vllm", "engine_options": options}))
    with pytest.raises(ConfigError, match="data_parallel_size"):
        plan_both(inputs)


def test_gpus_rescales_both_data_parallel_sizes() -> None:
    inputs = plan_inputs(load_config(PlanConfig, CONFIG_671B), gpus=96)
    assert inputs.parallel.dp == 4 and inputs.rollout is not None and inputs.rollout.dp == 2
    assert inputs.rollout.ep == 8  # the config's expert-parallel group, replicated
    with pytest.raises(ConfigError, match="multiple"):
        plan_inputs(load_config(PlanConfig, CONFIG_671B), gpus=50)


def test_a_collective_timeout_shorter_than_the_planned_rollout_is_refused() -> None:
    from agentgym.plan import PlanConfig, check_collective_timeout, rollout_seconds
    from agentgym.plan.timeout import MARGIN

    cfg = load_config(PlanConfig, CONFIG_671B, [])
    seconds = rollout_seconds(cfg)
    assert seconds is not None and seconds > 300  # what the old fixed 300 s did not cover
    check_collective_timeout(cfg)  # the default covers it
    short = load_config(PlanConfig, CONFIG_671B, ["distributed.timeout_s=600"])
    with pytest.raises(ConfigError, match=r"distributed\.timeout_s=\d"):
        check_collective_timeout(short)
    assert MARGIN * seconds > 600


def test_agentgym_train_refuses_the_short_timeout_at_start(tmp_path, capsys) -> None:
    from agentgym.cli import main

    out = tmp_path / "run"
    args = ["train", str(CONFIG_671B), "distributed.timeout_s=60", f"run.output_dir={out}"]
    assert main(args) == 2
    assert "distributed.timeout_s=" in capsys.readouterr().err
    assert not out.exists()  # refused before anything started


def test_the_plan_counts_the_base_precision_the_trainer_keeps() -> None:
    """model.quantize on the trainer's mesh keeps the routed experts quantized and the
    dense decoder Linears in bf16: the plan of the 671B config counts that, and says so."""
    from dataclasses import replace

    inputs = plan_inputs(load_config(PlanConfig, CONFIG_671B))
    assert inputs.parallel.experts_only_quantized and inputs.base_dtype == "fp8"
    lora, _ = plan_both(inputs)
    (base,) = [i for i in lora.items if i.name == "base weights"]
    assert "routed experts" in base.note
    unsharded = replace(inputs.parallel, shard_base=False)
    all_fp8, _ = plan_both(
        replace(inputs, parallel=replace(unsharded, experts_only_quantized=False))
    )
    experts_fp8, _ = plan_both(replace(inputs, parallel=unsharded))

    def base_gib(plan) -> float:
        return next(i.gib for i in plan.items if i.name == "base weights")

    assert base_gib(experts_fp8) > base_gib(all_fp8)  # bf16 dense Linears, unsharded


# ------------------------------------------------------------ the engine's cost (issue 40)
def test_the_kv_cache_margin_inside_gpu_memory_utilization_is_planned() -> None:
    """The engine's budget is gpu_memory_utilization x the GPU; the KV cache gets what
    its weights and working set leave, against max_num_seqs x max_model_len."""
    lora, _ = plan_both(plan_inputs(load_config(PlanConfig, CONFIG_671B)))
    eng = lora.engine
    assert eng is not None
    assert eng.budget == pytest.approx(0.55 * 80)
    assert eng.kv_room == pytest.approx(eng.budget - eng.weights - eng.workspace)
    assert eng.kv_need == pytest.approx(lora.item("rollout KV cache"))
    # the engine's side fits (the train phase decides the plan: tests/trainers/test_plan.py)
    assert eng.margin > 0 and eng.seqs_fit >= 256
    assert not any("preempt" in w for w in lora.warnings)


def test_a_kv_cache_short_of_max_num_seqs_is_a_warning_with_the_fix() -> None:
    cfg = load_config(PlanConfig, CONFIG_671B, ["rollout.engine_options.max_num_seqs=512"])
    lora, _ = plan_both(plan_inputs(cfg))
    eng = lora.engine
    assert eng is not None and eng.margin < 0 and 0 < eng.seqs_fit < 512
    (warning,) = [w for w in lora.warnings if "preempt" in w]
    assert f"hold {eng.seqs_fit} of the max_num_seqs=512" in warning
    need = (eng.weights + eng.workspace + eng.kv_need) / 80
    assert f"gpu_memory_utilization to {need + 0.005:.2f}" in warning
    assert not lora.fits
    # at the utilization the warning names, the cache fits again
    fixed = load_config(
        PlanConfig,
        CONFIG_671B,
        ["rollout.engine_options.max_num_seqs=512",
         f"rollout.engine_options.gpu_memory_utilization={need + 0.005:.2f}"],
    )  # fmt: skip
    assert plan_both(plan_inputs(fixed))[0].engine.margin >= 0


def test_sleep_level_1_pins_the_engines_weights_on_each_node() -> None:
    lora, _ = plan_both(plan_inputs(load_config(PlanConfig, CONFIG_671B)))
    eng = lora.engine
    assert eng.pinned_per_node == pytest.approx(8 * lora.item("rollout weights"))
    assert 100 < eng.pinned_per_node < 130  # ~112 GiB: 8 GPUs x 14 GiB of engine weights
    small = load_config(PlanConfig, CONFIG_671B, ["plan.host_mem_gib=96"])
    lora, _ = plan_both(plan_inputs(small))
    assert any("plan.host_mem_gib is 96" in w for w in lora.warnings) and not lora.fits
    level2 = load_config(PlanConfig, CONFIG_671B, ["rollout.engine_options.sleep_level=2"])
    assert plan_both(plan_inputs(level2))[0].engine.pinned_per_node == 0


def test_the_engines_first_start_counts_against_the_collective_timeout() -> None:
    from agentgym.plan import startup_seconds

    cfg = load_config(PlanConfig, CONFIG_671B)
    start = startup_seconds(cfg)
    lora, _ = plan_both(plan_inputs(cfg))
    read = (lora.item("base weights") + lora.item("rollout weights")) * 2**30 * 8 / 5e9
    assert start == pytest.approx(read + 60)  # the node's reads, then the engine's warm-up
    slow = load_config(
        PlanConfig,
        CONFIG_671B,
        ["plan.efficiency.host_io_gbps=0.2", "distributed.timeout_s=1800"],
    )
    with pytest.raises(ConfigError, match=r"the first start .*distributed\.timeout_s=\d"):
        from agentgym.plan import check_collective_timeout

        check_collective_timeout(slow)


def test_a_detector_threshold_below_the_longest_wait_is_refused_or_warned() -> None:
    from agentgym.plan import check_detector, rollout_seconds

    cfg = load_config(PlanConfig, CONFIG_671B)
    assert check_detector(cfg) == []  # the config's 1200 s covers 1.5 x the rollout
    short = load_config(PlanConfig, CONFIG_671B, ["health.stuck_after_s=120"])
    with pytest.raises(ConfigError, match=r"health\.stuck_after_s=\d.*stop the run"):
        check_detector(short)  # on_fault restart with max_restarts 0: the run would end
    warned = load_config(
        PlanConfig, CONFIG_671B, ["health.stuck_after_s=120", "distributed.on_fault=warn"]
    )
    (line,) = check_detector(warned)
    assert f"({rollout_seconds(cfg):,.0f} s)" in line and "reported only" in line


def test_a_launch_over_several_nodes_needs_an_absolute_run_folder() -> None:
    from agentgym.trainers import check_launch

    cfg = load_config(TrainConfig, CONFIG_671B, ["run.output_dir=runs/dapo"])
    assert check_launch(cfg, world_size=48, nnodes=1) == []
    with pytest.raises(ConfigError, match="absolute path on a file system every node mounts"):
        check_launch(cfg, world_size=48, nnodes=6)
    low = load_config(TrainConfig, CONFIG_671B, ["rollout.concurrency=128"])
    (warning,) = [w for w in check_launch(low, world_size=48, nnodes=1)]
    assert "rollout.concurrency=256" in warning  # one engine replica plays all 256
