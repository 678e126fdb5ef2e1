"""The parallel layout as numbers: sizes, checks, rank coordinates, stages, config errors,
and the experts' split/gather maths (no processes: these run in-process, fast)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from agentgym import ConfigError, load_config
from agentgym.generation import stage_ranges
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.parallel import Layout
from agentgym.trainers.parallel.experts import ExpertShard, shard_expert_tensor

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_stages_are_contiguous_and_earlier_stages_take_the_remainder():
    assert [len(r) for r in stage_ranges(61, 6)] == [11, 10, 10, 10, 10, 10]
    assert stage_ranges(2, 2) == [range(0, 1), range(1, 2)]
    with pytest.raises(ConfigError, match=r"lower distributed\.pp"):
        stage_ranges(2, 3)


def test_the_planner_cuts_the_trainers_stages():
    """One split: every planner module that walks pipeline stages (training and the
    rollout engine) uses the trainer's ``stage_ranges``, and its errors name ``pp``."""
    from agentgym.plan import memory, plans, rollout_time, search_memory, train_time

    for module in (memory, plans, rollout_time, search_memory, train_time):
        assert module.stage_ranges is stage_ranges, module.__name__
        assert not hasattr(module, "pipeline_stages")
    with pytest.raises(ConfigError, match=r"exceeds the 2 decoder layers; lower pp\."):
        stage_ranges(2, 3, key="pp")


def test_world_size_must_be_the_product_and_the_error_names_the_sizes():
    layout = Layout(dp_shard=2, ep=2)
    assert layout.world_size == 4 and layout.dp == 4 and layout.expert_split == 2
    layout.check_world(4)
    with pytest.raises(ConfigError, match=r"2 \* 1 \* 2 \* 1 = 4 processes.*has 2.*--nproc 4"):
        layout.check_world(2)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="positive integer"):
            Layout(tp=bad)  # type: ignore[arg-type]


def test_ranks_are_numbered_tp_fastest_then_ep_dp_shard_pp():
    layout = Layout(dp_shard=2, tp=2, ep=2, pp=2)
    c = [layout.coords(r) for r in range(16)]
    assert [x.tp for x in c[:4]] == [0, 1, 0, 1]
    assert [x.ep for x in c[:4]] == [0, 0, 1, 1]
    assert c[4].dp_shard == 1 and c[8].pp == 1
    # the micro-batches: one share per (dp_shard, ep), the same for its tp ranks and stages
    assert [layout.dp_rank(r) for r in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert layout.dp_rank(8) == 0
    # one rank per share reports the loss sums: tp 0 of the last stage
    assert [r for r in range(16) if layout.reports_metrics(r)] == [8, 10, 12, 14]


def test_model_checks_name_what_does_not_divide():
    arch = SimpleNamespace(
        num_attention_heads=4,
        num_key_value_heads=4,
        kv_lora_rank=16,
        n_routed_experts=4,
        num_hidden_layers=2,
        tie_word_embeddings=False,
    )
    Layout(tp=2, ep=2).check_model(arch)
    with pytest.raises(ConfigError, match="num_attention_heads=4"):
        Layout(tp=3).check_model(arch)
    with pytest.raises(ConfigError, match=r"ep \* tp = 4 \* 2 = 8.*n_routed_experts=4"):
        Layout(tp=2, ep=4).check_model(arch)
    with pytest.raises(ConfigError, match="untied embeddings"):
        Layout(pp=2).check_model(SimpleNamespace(**{**vars(arch), "tie_word_embeddings": True}))
    gqa = SimpleNamespace(num_attention_heads=4, num_key_value_heads=1, num_hidden_layers=1)
    with pytest.raises(ConfigError, match="num_key_value_heads=1"):
        Layout(tp=2).check_model(gqa)


def test_config_section_needs_fsdp2_and_positive_sizes():
    cfg = load_config(TrainConfig, None, ["distributed.strategy=fsdp2", "distributed.tp=2"])
    assert Layout.from_config(cfg.distributed) == Layout(tp=2)
    with pytest.raises(ConfigError, match=r"distributed\.strategy=fsdp2"):
        load_config(TrainConfig, None, ["distributed.strategy=deepspeed", "distributed.ep=2"])
    with pytest.raises(ConfigError, match=r"distributed\.pp must be a positive integer"):
        load_config(TrainConfig, None, ["distributed.strategy=fsdp2", "distributed.pp=0"])


def test_what_a_mesh_does_not_run_is_refused_at_config_time():
    mesh = ["distributed.strategy=fsdp2", "distributed.ep=2", "model.preset=tiny-deepseek-v3"]
    load_config(TrainConfig, None, [*mesh, "algorithm.name=vapo"])  # the critic adapter runs
    with pytest.raises(ConfigError, match=r"separate critic model.*share_base: true"):
        load_config(
            TrainConfig,
            None,
            [*mesh, "algorithm.name=ppo", "critic.share_base=false", "critic.path=/some/model"],
        )
    with pytest.raises(ConfigError, match=r"router_replay.*ep=2"):
        load_config(TrainConfig, None, [*mesh, "algorithm.router_replay=true"])
    with pytest.raises(ConfigError, match="dropout masks"):
        load_config(TrainConfig, None, [*mesh, "lora.dropout=0.1"])


def test_the_671b_layout_is_a_valid_trainer_config():
    cfg = load_config(TrainConfig, CONFIGS / "deepseek_v3_671b_48xh100.yaml", [])
    layout = Layout.from_config(cfg.distributed)
    assert (layout.dp_shard, layout.tp, layout.ep, layout.pp) == (1, 4, 2, 6)
    assert layout.world_size == 48
    assert layout.expert_split == 8  # the planner's ep: 256 experts, 32 per GPU
    assert layout.dp == 2  # the planner's dp


def test_a_config_whose_model_the_layout_cannot_split_is_refused():
    arch = "{num_attention_heads: 6, num_hidden_layers: 4, n_routed_experts: 8}"
    with pytest.raises(ConfigError, match="num_attention_heads=6"):
        load_config(
            TrainConfig,
            None,
            [
                "model.path=/nonexistent",
                f"model.architecture={arch}",
                "distributed.strategy=fsdp2",
                "distributed.tp=4",
            ],
        )


def test_expert_shards_concatenate_back_to_peft_layout():
    total, r = 4, 3
    base = torch.randn(total, 5, 7)
    a = torch.randn(r * total, 7)  # expert e in rows e*r .. (e+1)*r
    b = torch.randn(5, r * total)  # expert e in columns e, E+e, 2E+e
    parts = {k: [] for k in ("base", "lora_A", "lora_B")}
    for i in range(2):
        shard = ExpertShard(total=total, local=2, offset=2 * i)
        for kind, full in (("base", base), ("lora_A", a), ("lora_B", b)):
            parts[kind].append(shard_expert_tensor(full, kind, shard))
    assert torch.equal(torch.cat(parts["base"]), base)
    assert torch.equal(torch.cat(parts["lora_A"]), a)
    joined = torch.cat([p.reshape(5, r, 2) for p in parts["lora_B"]], dim=2).reshape(5, -1)
    assert torch.equal(joined, b)
    # rank 1 holds experts 2 and 3: B's columns for those experts only
    shard = ExpertShard(total=total, local=2, offset=2)
    assert torch.equal(parts["lora_B"][1].reshape(5, r, 2)[:, :, 0], b.reshape(5, r, 4)[:, :, 2])
    assert torch.equal(parts["lora_A"][1][:r], a[2 * r : 3 * r])
    assert shard.offset == 2


def test_the_planner_plans_the_trainers_layout():
    from agentgym.plan import plan_inputs

    path = CONFIGS / "deepseek_v3_671b_48xh100.yaml"
    p = plan_inputs(load_config(TrainConfig, path, [])).parallel
    assert (p.tp, p.ep, p.pp, p.dp) == (4, 8, 6, 2)
    # plan.parallel without sizes: the planner reads them from distributed
    ones = [f"plan.parallel.{k}=1" for k in ("tp", "ep", "pp", "dp")]
    p = plan_inputs(load_config(TrainConfig, path, ones)).parallel
    assert (p.tp, p.ep, p.pp, p.dp) == (4, 8, 6, 2)
    # sizes in both that disagree: refused, naming both
    other = ["distributed.tp=2", "distributed.ep=4"]  # still 48 GPUs: 2 x 4 x 6
    with pytest.raises(ConfigError, match=r"'tp': 2, 'ep': 8, 'pp': 6, 'dp': 4"):
        plan_inputs(load_config(TrainConfig, path, other))
    p = plan_inputs(load_config(TrainConfig, path, [*other, *ones])).parallel
    assert (p.tp, p.ep, p.pp, p.dp) == (2, 8, 6, 4)
