"""A torchrun worker: the bytes one rank of a ParallelLearner holds, as a JSON line.

Run as ``python -m torch.distributed.run --nproc-per-node N parallel_bytes.py SIZES OUT``
(``SIZES``: the ``distributed`` layout as JSON, e.g. ``{"ep": 2}``). Each rank builds the
tiny DeepSeek-V3 with a rank-8 adapter on apply_lora's default targets, splits it over the
mesh, and writes ``OUT/rank<r>.json``: ``{"rank", "stage", "base", "lora"}``, the bytes
of its shares of the frozen base and of the adapter (DTensors by their local shard).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from agentgym.trainers import LoraSettings, apply_lora, build_preset, build_tokenizer
from agentgym.trainers.config import AlgorithmConfig, DistributedConfig, OptimConfig
from agentgym.trainers.distributed import shutdown, start_distributed
from agentgym.trainers.parallel import ParallelLearner


def main() -> None:
    info = start_distributed(
        DistributedConfig(strategy="fsdp2", **json.loads(sys.argv[1])), lora=True
    )
    model = build_preset("tiny-deepseek-v3", build_tokenizer(), seed=0)
    model = apply_lora(model, LoraSettings(r=8), seed=1)
    learner = ParallelLearner(
        model, AlgorithmConfig(), OptimConfig(), pad_id=0, dist=info,
        layout=info.layout,
    )  # fmt: skip

    def nbytes(t: object) -> int:
        t = t.to_local() if hasattr(t, "to_local") else t
        return t.numel() * t.element_size()

    params = list(learner.model.named_parameters())
    row = {
        "rank": info.rank,
        "stage": learner.pmesh.coords.pp,
        "base": sum(nbytes(p) for n, p in params if "lora_" not in n),
        "lora": sum(nbytes(p) for n, p in params if "lora_" in n),
    }
    (Path(sys.argv[2]) / f"rank{info.rank}.json").write_text(json.dumps(row))
    # leave the process group before exiting: gloo's threads torn down at interpreter
    # exit abort the process ("terminate called without an active exception")
    shutdown(info)


if __name__ == "__main__":
    main()
