"""Where an engine sits on the trainer's ranks, and what each of its workers is sent.

No vLLM here: the placement arithmetic (:class:`~agentgym.generation.EngineLayout`), the
plan that meets every worker's needs from the learner's holdings (nearest holder first,
expert range by expert range), peft's fused-expert layout cut and joined by expert, and
vLLM's per-expert names checked against peft's own delta weights. The sync itself runs
over two gloo processes (``tests/helpers/sync_ranks.py``) with a learner and an engine
whose expert splits differ.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentgym import ConfigError
from agentgym.generation import EngineLayout, Replicas, stage_ranges
from agentgym.generation.sync import expert_slice, join_experts, plan_pieces
from agentgym.generation.vllm_lora import per_expert_tensors

HELPERS = Path(__file__).resolve().parents[1] / "helpers"


# ----------------------------------------------------------------------------- layout
def test_ranks_are_numbered_as_vllms_external_launcher_numbers_its_workers():
    layout = EngineLayout(world_size=8, tp=2, pp=2)
    assert layout.replicas == 2 and layout.size == 4
    places = [(w.replica, w.stage, w.tp) for w in map(layout.worker, (0, 1, 2, 5))]
    assert places == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 1)]
    assert all(layout.rank_of(layout.worker(r)) == r for r in range(8))
    assert [layout.leader(i) for i in range(2)] == [0, 4]
    assert layout.replicas_of(4) == Replicas(index=1, count=2, leads=True)
    assert layout.replicas_of(6) == Replicas(index=1, count=2, leads=False)


def test_a_replica_deals_itself_every_countth_item_and_a_follower_none():
    items = list(range(7))
    assert Replicas(1, 3, True).deal(items) == [1, 4]
    assert Replicas(1, 3, False).deal(items) == []
    assert Replicas(2, 3, True).owns(5) and not Replicas(2, 3, False).owns(5)


def test_stages_take_the_trainers_split_and_experts_split_over_tp():
    layout = EngineLayout(world_size=48, tp=8, pp=6, expert_parallel=True)
    assert layout.partition(61) == [11, 10, 10, 10, 10, 10]
    assert [len(r) for r in stage_ranges(61, 6)] == layout.partition(61)
    assert layout.layers_of(8, 61) == range(11, 21)  # node 1: stage 1
    assert layout.experts_of(8 + 3, 256) == range(96, 128)  # worker 3 of a node: 32 experts
    assert EngineLayout(world_size=2, tp=2).experts_of(1, 256) == range(256)  # no EP: all
    lines = layout.describe(61, 256)
    assert "1 replica(s) of tp 8 x pp 6 over 48 ranks" in lines[0]
    assert "stage 1: layers 11-20" in lines[1] and "32 of 256" not in lines[2]


def test_a_layout_that_does_not_divide_the_ranks_says_what_to_change():
    with pytest.raises(ConfigError, match="does not divide the 6 processes"):
        EngineLayout(world_size=6, tp=4)
    with pytest.raises(ConfigError, match="do not split evenly"):
        EngineLayout(world_size=3, tp=3, expert_parallel=True).experts_of(0, 8)


# ----------------------------------------------------------------------------- the plan
def test_needs_met_on_their_own_rank_move_nothing():
    held = [{"a": None, "e": (0, 4, 8)}, {"a": None, "e": (4, 8, 8)}]
    needs = [{"a": None, "e": (0, 4, 8)}, {"a": None, "e": (4, 8, 8)}]
    pieces = plan_pieces(held, needs)
    assert all(p.src == p.dst for p in pieces) and len(pieces) == 4


def test_an_expert_range_held_by_two_ranks_comes_from_both_nearest_first():
    held = [{"e": (0, 4, 8)}, {"e": (4, 8, 8)}, {"e": (0, 8, 8)}]
    pieces = plan_pieces(held, [{"e": (2, 6, 8)}, {}, {}])
    assert [(p.src, p.experts) for p in pieces] == [(0, (2, 4)), (1, (4, 6))]
    # a whole need: its own share first, the rest from the nearest holder of it
    whole = plan_pieces(held, [{}, {"e": None}, {}])
    assert [(p.src, p.experts) for p in whole] == [(0, (0, 4)), (1, (4, 8))]
    held[2] = {"e": None}  # a rank with the tensor whole serves a whole need at once
    assert [(p.src, p.experts) for p in plan_pieces(held, [{}, {"e": None}, {}])] == [(2, None)]
    with pytest.raises(RuntimeError, match="no rank holds expert 8"):
        plan_pieces([{"e": (0, 8, 10)}], [{"e": (6, 10, 10)}])
    with pytest.raises(RuntimeError, match="no rank holds adapter tensor 'x'"):
        plan_pieces([{}], [{"x": None}])


@pytest.mark.parametrize("kind", ["lora_A", "lora_B"])
def test_expert_rows_are_cut_and_joined_in_peft_fused_layout(kind):
    name = f"model.layers.1.mlp.experts.base_layer.{kind}.weight"
    experts, r = 6, 3
    full = torch.randn(experts * r, 5) if kind == "lora_A" else torch.randn(7, experts * r)
    parts = [expert_slice(name, full, range(6), range(a, b)) for a, b in ((0, 2), (2, 3), (3, 6))]
    assert torch.equal(join_experts(name, parts, [2, 1, 3]), full)
    middle = expert_slice(name, full, range(6), range(2, 5))  # a share cut again
    assert torch.equal(
        expert_slice(name, middle, range(2, 5), range(3, 4)),
        expert_slice(name, full, range(6), range(3, 4)),
    )


def test_vllms_per_expert_tensors_carry_peft_deltas_expert_by_expert(tokenizer):
    from agentgym.generation import adapter_state_dict, build_preset
    from agentgym.trainers import LoraSettings, apply_lora

    peft = apply_lora(
        build_preset("tiny-deepseek-v3", tokenizer, seed=0), LoraSettings(r=4, target_experts=True)
    )
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n, p in peft.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=gen))
    from peft.tuners.lora.layer import ParamWrapper

    deltas = {
        n: (m.parameter_name, m.get_delta_weight("default") / m.scaling["default"])
        for n, m in peft.named_modules()
        if isinstance(m, ParamWrapper)
    }
    state = adapter_state_dict(peft)
    layer = "base_model.model.model.layers.1.mlp"
    keep = range(1, 3)  # a worker serving experts 1 and 2 of 4
    held = {k: expert_slice(k, v, range(4), keep) for k, v in state.items() if ".mlp.experts." in k}
    tensors = {}
    for k, v in held.items():
        tensors.update(per_expert_tensors(k, v, keep))
    assert sorted({k.split(".experts.")[1].split(".")[0] for k in tensors}) == ["1", "2"]
    (_, gate_up), (_, down) = deltas[f"{layer}.experts.base_layer"], deltas[f"{layer}.experts"]
    inter = gate_up.shape[1] // 2
    for e in keep:
        w = {
            proj: tensors[f"{layer}.experts.{e}.{proj}.lora_B.weight"]
            @ tensors[f"{layer}.experts.{e}.{proj}.lora_A.weight"]
            for proj in ("gate_proj", "up_proj", "down_proj")
        }
        assert torch.allclose(w["gate_proj"], gate_up[e, :inter], atol=1e-5)
        assert torch.allclose(w["up_proj"], gate_up[e, inter:], atol=1e-5)
        assert torch.allclose(w["down_proj"], down[e], atol=1e-5)


# ----------------------------------------------------------------------------- the sync
def test_the_sync_sends_each_worker_its_experts_from_the_ranks_that_hold_them(tmp_path):
    """Two gloo ranks: the learner holds experts 0-3 / 4-7 (rank 0 / 1), the engine's
    workers serve 0-5 / 6-7 and every dense tensor; each gets exactly that, and only the
    two experts rank 0 lacks travel (from rank 1)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HELPERS), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": "1",
    }
    cmd = [sys.executable, "-m", "agentgym.cli.local_ranks", "2"]
    proc = subprocess.run(
        [*cmd, str(HELPERS / "sync_ranks.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["equal"] for r in rows] == [True, True]
    assert [r["experts"] for r in rows] == [[0, 6], [6, 8]]
    expert_bytes = 4 * 3 * (5 + 7)  # one expert's rows of A [r, 5] and B [7, r], float32
    assert rows[0]["received"] == 2 * expert_bytes and rows[1]["sent"] == 2 * expert_bytes
    assert rows[0]["sent"] == 0 and rows[1]["received"] == 0
