"""``agentgym train --dry-run``: one rank of a launch run here, on fake tensors
(trainers/dry_run/, agentgym/plan/dry_run.py).

* rank 47 of the 671B config sets up at DeepSeek-V3's real shapes against a header-only
  description of the published checkpoint: its base share is the planner's, it reads
  its share once, it never holds more host memory than 1.25x its own adapter and
  optimizer share (the whole adapter and a deep copy of it before), its engine worker's
  adapter slice never leaves its stage; the set-up alone (the step at 671B takes minutes:
  the figures in docs/distributed.md);
* the CLI prints each rank beside its stage's plan and exits 1 on a rank whose set-up
  fails;
* a rank is also checked against the config's own call, whose micro-batches the dry run
  does not all run (the 671B config's middle stages do not fit it).

The byte-for-byte match with real multi-process runs is in test_parallel_plan.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgym import load_config

ROOT = Path(__file__).resolve().parents[2]
CONFIG_671B = ROOT / "configs" / "deepseek_v3_671b_48xh100.yaml"
GIB = float(1 << 30)


@pytest.mark.slow
def test_rank_47_of_the_671b_config_sets_up_at_the_real_shapes():
    from agentgym.plan import PlanConfig, plan_inputs, plan_lora
    from agentgym.trainers import dry_run_rank

    cfg = load_config(PlanConfig, CONFIG_671B)
    f = dry_run_rank(cfg, 47, seq_len=8192, prompt_tokens=1024, step=False, say=str)
    assert f.coords == {"pp": 5, "dp_shard": 0, "ep": 1, "tp": 3}
    assert (f.layers, f.experts) == (range(51, 61), range(224, 256))
    inputs = plan_inputs(cfg)
    plan = plan_lora(
        inputs.arch, lora=inputs.lora, parallel=inputs.parallel, base_dtype=inputs.base_dtype,
        train=inputs.train, rollout=inputs.rollout, hardware=inputs.hardware,
        overheads=False, stage=5,
    )  # fmt: skip
    assert f.base / GIB == pytest.approx(plan.item("base weights"), rel=0.01)
    assert f.adapter / GIB == pytest.approx(plan.item("LoRA params"), rel=0.05)
    assert 0.97 * f.base < f.bytes_read < f.base  # its share, once (fp8 values and scales)
    share = f.adapter * 3  # the adapter and AdamW's two moments, all float32
    assert f.host_peak <= 1.25 * share  # the adapter was drawn whole, and copied, before
    assert f.host_before_alloc < 1 << 20
    assert f.draw_numbers > 7e9  # the last stage's rows come last in peft's draws
    engine = f.engine
    assert engine["stage"] == 5 and engine["experts"] == [224, 256]
    assert engine["from_other_stages_fp32"] == 0 and engine["adapter_fp32"] > f.adapter


@pytest.mark.slow
def test_the_cli_prints_each_rank_beside_the_plan_and_fails_on_a_bad_rank(capsys):
    from agentgym.cli import main

    arch = (
        "{model_type: deepseek_v3, vocab_size: 262, hidden_size: 64, intermediate_size: 128,"
        " moe_intermediate_size: 32, num_hidden_layers: 2, num_attention_heads: 4,"
        " num_key_value_heads: 4, n_routed_experts: 4, n_shared_experts: 1,"
        " num_experts_per_tok: 2, first_k_dense_replace: 1, q_lora_rank: 32,"
        " kv_lora_rank: 16, qk_nope_head_dim: 16, qk_rope_head_dim: 8, v_head_dim: 16,"
        " n_group: 1, topk_group: 1, tie_word_embeddings: false}"
    )
    args = [
        "train", f"model.architecture={arch}", "model.preset=null", "model.dtype=float32",
        "lora.r=8", "distributed.strategy=fsdp2", "distributed.ep=2",
        "distributed.activation_checkpointing=true", "plan.gpus=2", "plan.parallel.ep=2",
        "plan.parallel.dp=2", "plan.seq_len=64", "--dry-run", "--rank", "1",
    ]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "rank 1 of 2: stage 0" in out and "experts 2-3" in out
    for line in ("base weights", "optimizer states", "training step peak", "host at set-up"):
        assert line in out
    assert main([*args[:-1], "5"]) == 1  # outside the 2 ranks: named, exit 1
    assert "rank 5: the set-up or first step FAILS" in capsys.readouterr().out


def test_a_rank_is_checked_against_the_configs_own_call():
    """The dry run runs pp micro-batches; the config's schedule runs a data-parallel
    rank's share of an update (256 for the 671B config) in windows of
    ``distributed.pp_window`` (48): with the window every stage fits 80 GiB; in one run
    of 256 a middle stage's receive buffers do not, the first stage's do (one kind of
    buffer)."""
    from agentgym.plan import PlanConfig, plan_inputs
    from agentgym.plan.dry_run import _stage_plan, compare
    from agentgym.trainers.dry_run.rank import RankFigures

    def verdicts(*overrides: str, calls: int) -> dict[int, bool]:
        inputs = plan_inputs(load_config(PlanConfig, CONFIG_671B, list(overrides)))
        out = {}
        for stage, layers in ((0, range(0, 11)), (1, range(11, 21))):
            planned = _stage_plan(inputs, stage, 6)
            figures = RankFigures(
                rank=8 * stage, world_size=48, layers=layers, experts=range(0, 32),
                coords={"pp": stage, "dp_shard": 0, "ep": 0, "tp": 0}, micro_batches=6,
                base=int(planned.item("base weights") * GIB),
                step_peak=int(planned.train_gib * GIB),
            )  # fmt: skip
            lines, out[stage] = compare(figures, inputs, 1.0)
            (call,) = [line for line in lines if "the config's call" in line]
            assert f"{calls} micro-batches per data-parallel rank, the dry run's 6" in call
        return out

    assert verdicts(calls=48) == {0: True, 1: True}
    assert verdicts("distributed.pp_window=0", calls=256) == {0: True, 1: False}
