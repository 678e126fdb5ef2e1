"""``agentgym plan --search``: the fast memory sums equal the planner's, the search keeps
only layouts that fit and respect the GPU counts, ranks them, and explains the winner."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest

from agentgym import ConfigError, load_config
from agentgym.plan import (
    ParallelSpec,
    PlanConfig,
    plan_both,
    plan_inputs,
    plan_lora,
    search_layouts,
)
from agentgym.plan.search_memory import (
    peak_gib,
    rollout_memory,
    train_memory,
)
from agentgym.trainers import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
CONFIG_671B = ROOT / "configs" / "deepseek_v3_671b_48xh100.yaml"
CONFIG_H200 = ROOT / "configs" / "deepseek_v3_671b_48xh200.yaml"


def inputs_671b(*overrides: str, **kw):
    return plan_inputs(load_config(TrainConfig, CONFIG_671B, list(overrides)), **kw)


@pytest.fixture(scope="module")
def result_671b():
    return search_layouts(inputs_671b(for_search=True))


# --------------------------------------------------------------------------- fast memory


@pytest.mark.parametrize(
    ("parallel", "mbs", "ckpt", "base", "rollout"),
    [
        (ParallelSpec(tp=4, ep=8, pp=6, dp=2, zero_stage=1), 1, True, "fp8", (8, 6, 1, 8, 256, 1)),
        (ParallelSpec(tp=1, ep=8, pp=6, dp=8, zero_stage=3), 2, True, "fp8", (8, 3, 2, 16, 128, 0)),
        (
            ParallelSpec(tp=8, ep=16, pp=3, dp=2, zero_stage=0),
            1,
            False,
            "int4",
            (4, 6, 2, 8, 64, 2),
        ),
        (
            ParallelSpec(tp=2, ep=4, pp=12, dp=2, zero_stage=2),
            4,
            False,
            "bf16",
            (16, 3, 1, 16, 512, 1),
        ),
    ],
)
@pytest.mark.parametrize("critic_r", [0, 8])  # PPO/VAPO's critic adapter beside the policy's
def test_fast_memory_equals_plan_lora(parallel, mbs, ckpt, base, rollout, critic_r) -> None:
    inp = inputs_671b()
    inp = replace(inp, lora=replace(inp.lora, critic_r=critic_r))
    train = replace(inp.train, micro_batch_size=mbs, activation_checkpointing=ckpt)
    tp, pp, dp, ep, seqs, sleep = rollout
    r = replace(
        inp.rollout,
        tp=tp,
        pp=pp,
        dp=dp,
        ep=ep,
        max_num_seqs=seqs,
        sleep_level=sleep,
        gpu_memory_utilization=1.0,
    )
    plan = plan_lora(
        inp.arch,
        lora=inp.lora,
        parallel=parallel,
        base_dtype=base,
        train=train,
        rollout=r,
        hardware=inp.hardware,
    )
    tm = train_memory(inp.arch, lora=inp.lora, parallel=parallel, train=train, base_dtype=base)
    rm = rollout_memory(inp.arch, inp.lora, r, base)
    assert peak_gib(tm, rm) == pytest.approx(plan.total_gib, rel=1e-9)


def test_no_checkpointing_keeps_every_layer() -> None:
    # the fewest micro-batches per call: the pipeline's receive buffers (the middle
    # stages') do not hide what checkpointing changes
    inp = inputs_671b()
    inp = replace(inp, train=replace(inp.train, update_sequences=0))
    on, _ = plan_both(inp)
    off, _ = plan_both(replace(inp, train=replace(inp.train, activation_checkpointing=False)))
    assert off.item("activations: layer inputs") > 5 * on.item("activations: layer inputs")
    assert off.train_gib > on.train_gib and off.stage == 0  # the first stage keeps the most
    # a hand-written plan: section still asks for checkpointing (tests/trainers/test_plan_config.py)
    with pytest.raises(ConfigError, match="search"):
        load_config(PlanConfig, CONFIG_671B, ["plan.activation_checkpointing=false"])


# --------------------------------------------------------------------------- the search


def test_search_ranks_layouts_that_fit_and_respect_the_cluster(result_671b) -> None:
    r = result_671b
    assert r.space > 100_000 and 0 < r.fitting < r.space
    seconds = [s.seconds for s in r.ranked]
    assert seconds == sorted(seconds) and len(r.ranked) == 5
    arch = inputs_671b().arch
    for s in (*r.ranked, *r.pareto):
        p, ro = s.layout.parallel, s.layout.rollout
        assert p.tp * p.pp * p.dp == 48 and ro.tp * ro.pp * ro.dp == 48
        assert p.tp <= 8 and arch.num_attention_heads % p.tp == 0
        assert arch.n_routed_experts % p.ep == 0 and arch.n_routed_experts % ro.ep == 0
        assert s.peak_gib <= 80 and s.headroom_gib == pytest.approx(80 - s.peak_gib)
        assert s.seconds == pytest.approx(sum(s.step.phases.values()))


def test_pareto_front_trades_headroom_for_time(result_671b) -> None:
    front = result_671b.pareto
    assert len(front) >= 3
    for a, b in itertools.pairwise(front):
        assert b.seconds >= a.seconds and b.peak_gib < a.peak_gib
    assert front[0].seconds == pytest.approx(result_671b.ranked[0].seconds)


def test_winner_beats_the_config_and_says_why(result_671b) -> None:
    r = result_671b
    assert r.baseline is not None
    assert r.ranked[0].seconds <= r.baseline.seconds
    text = " ".join(r.explanation)
    assert "critical resource" in text and "runner-up" in text
    assert "config's own layout" in text


def test_search_is_deterministic() -> None:
    a = search_layouts(inputs_671b(for_search=True), top=3)
    b = search_layouts(inputs_671b(for_search=True), top=3)
    assert [s.layout for s in a.ranked] == [s.layout for s in b.ranked]
    assert [s.seconds for s in a.pareto] == [s.seconds for s in b.pareto]


def test_search_widens_base_and_adapter_when_asked() -> None:
    narrow = search_layouts(inputs_671b(for_search=True), top=1)
    assert any("base weights" in h for h in narrow.held)
    wide = search_layouts(
        inputs_671b(
            "plan.search.base_weights=[fp8, int4]",
            "plan.search.lora_ranks=[8, 64]",
            "plan.search.lora_targets=[attention, all]",
            for_search=True,
        ),
        top=50,
    )
    assert wide.held == ()
    assert {s.layout.base_dtype for s in wide.ranked} <= {"fp8", "int4"}
    assert wide.space == pytest.approx(narrow.space * 8, rel=0.01)


def test_full_finetune_search_on_512_gpus() -> None:
    r = search_layouts(inputs_671b(gpus=512, for_search=True), mode="full", top=2)
    win = r.ranked[0]
    assert win.layout.lora is None and win.layout.base_dtype == "bf16"
    p = win.layout.parallel
    assert p.tp * p.pp * p.dp == 512 and win.peak_gib <= 80
    assert "train: forward+backward" in win.step.phases


def test_nothing_fits_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no layout"):
        search_layouts(inputs_671b(gpus=8, gpu_mem_gib=24, for_search=True))


def test_dense_model_search() -> None:
    cfg = load_config(
        TrainConfig,
        None,
        [
            "model.path=/nonexistent",
            "model.architecture={model_type: qwen2, hidden_size: 64, num_hidden_layers: 2, "
            "vocab_size: 100, num_attention_heads: 4, num_key_value_heads: 2, "
            "intermediate_size: 128, max_position_embeddings: 512}",
            "plan.gpus=2",
            "plan.gpu_mem_gib=24",
            "plan.parallel.dp=2",
        ],
    )
    r = search_layouts(plan_inputs(cfg, for_search=True))
    assert all(s.layout.parallel.ep == 1 for s in r.ranked)
    assert r.ranked[0].seconds > 0


# --------------------------------------------------------------------------- CLI


def test_cli_search_prints_ranking_front_and_reasons(capsys) -> None:
    from agentgym.cli import main

    assert main(["plan", str(CONFIG_671B), "--search", "--top", "3"]) == 0
    out = capsys.readouterr().out
    for text in (
        "top 3 by modelled step time",
        "Pareto front",
        "why:",
        "winner by phase",
        "disaggregated",
        "the winner's memory",
    ):
        assert text in out


def test_cli_search_json_and_full_finetune(capsys) -> None:
    from agentgym.cli import main

    assert (
        main(
            [
                "plan",
                str(CONFIG_671B),
                "--search",
                "--full-finetune",
                "--gpus",
                "512",
                "--top",
                "1",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["mode"] == "full" and data["gpus"] == 512 and len(data["ranked"]) == 1
    assert main(["plan", str(CONFIG_671B), "--full-finetune"]) == 2


def test_h200_config_plans_and_searches() -> None:
    inp = plan_inputs(load_config(TrainConfig, CONFIG_H200), for_search=True)
    assert inp.hardware.gpu_mem_gib == 141 and inp.timing.cluster.gpu.name == "h200"
    lora, _ = plan_both(inp)
    assert lora.fits
    r = search_layouts(inp, top=1)
    assert r.ranked[0].peak_gib <= 141
