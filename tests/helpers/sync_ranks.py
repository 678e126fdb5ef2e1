"""A torchrun worker: :class:`~agentgym.generation.AdapterSync` between a learner and an
engine whose expert splits differ (two gloo ranks, no model).

The adapter: a dense tensor and peft's two fused-expert tensors of 8 experts at rank 3.
The learner's rank ``r`` holds the dense tensor whole and experts ``4r .. 4r+3``; the
engine's worker on rank 0 serves experts 0-5, on rank 1 experts 6-7 (and the dense tensor
both). Each rank writes ``OUT/rank<r>.json``: whether its worker got exactly its slices,
the expert range it was handed, the bytes it sent and received.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from agentgym.generation import AdapterShard, AdapterSync, Need
from agentgym.generation.sync import expert_slice

DENSE = "m.model.layers.0.self_attn.q_proj.lora_A.weight"
EXPERT_A = "m.model.layers.1.mlp.experts.base_layer.lora_A.weight"
EXPERT_B = "m.model.layers.1.mlp.experts.base_layer.lora_B.weight"
SERVES = [range(0, 6), range(6, 8)]


def full() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {
        DENSE: torch.randn(4, 5, generator=gen),
        EXPERT_A: torch.randn(8 * 3, 5, generator=gen),
        EXPERT_B: torch.randn(7, 8 * 3, generator=gen),
    }


class Learner:
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def adapter_shards(self) -> list[AdapterShard]:
        whole, mine = full(), range(4 * self.rank, 4 * self.rank + 4)
        return [
            AdapterShard(DENSE, whole[DENSE]),
            *(
                AdapterShard(k, expert_slice(k, whole[k], range(8), mine), experts=mine, total=8)
                for k in (EXPERT_A, EXPERT_B)
            ),
        ]


class Engine:
    def __init__(self, rank: int) -> None:
        self.serves = SERVES[rank]
        self.got: dict[str, torch.Tensor] = {}
        self.experts: range | None = None

    def adapter_needs(self, shapes, num_experts=0):
        return {
            k: Need(experts=self.serves, total=num_experts) if ".experts." in k else Need()
            for k in shapes
        }

    def load_adapter(self, weights, experts=None):
        self.got, self.experts = dict(weights), experts


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    engine = Engine(rank)
    stats = AdapterSync(engine, num_experts=8).push(Learner(rank))
    whole = full()
    want = {
        DENSE: whole[DENSE],
        **{k: expert_slice(k, whole[k], range(8), engine.serves) for k in (EXPERT_A, EXPERT_B)},
    }
    equal = engine.got.keys() == want.keys() and all(
        torch.equal(engine.got[k], want[k]) for k in want
    )
    row = {
        "rank": rank,
        "equal": equal,
        "experts": [engine.experts.start, engine.experts.stop],
        "sent": stats.sent,
        "received": stats.received,
        "held": stats.held,
        "served": stats.served,
    }
    (Path(sys.argv[1]) / f"rank{rank}.json").write_text(json.dumps(row))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
