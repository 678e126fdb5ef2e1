"""A torchrun worker: the bytes one rank of a ParallelLearner holds, as a JSON line.

Run as ``python -m torch.distributed.run --nproc-per-node N parallel_bytes.py SIZES OUT``
(``SIZES``: the ``distributed`` layout as JSON, e.g. ``{"ep": 2}``). Each rank builds the
tiny DeepSeek-V3 with a rank-8 adapter on apply_lora's default targets, splits it over the
mesh, and writes ``OUT/rank<r>.json``: ``{"rank", "stage", "base", "lora"}``, the bytes
of its shares of the frozen base and of the adapter (DTensors by their local shard).

``SIZES`` may be a JSON list of layouts of the same number of processes: one start-up (the
imports and the process group are most of a launch's time) builds each in turn, a model,
adapter, mesh and learner of its own, and ``OUT/rank<r>.json`` is ``{"rank", "runs":
[row, ...]}``, a row per layout in order.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from agentgym.generation import build_preset, build_tokenizer
from agentgym.trainers import LoraSettings, apply_lora
from agentgym.trainers.config import AlgorithmConfig, DistributedConfig, OptimConfig
from agentgym.trainers.distributed import shutdown, start_distributed
from agentgym.trainers.parallel import ParallelLearner


def main() -> None:
    arg = json.loads(sys.argv[1])
    layouts = arg if isinstance(arg, list) else [arg]
    kept: list[object] = []  # every learner lives to the end: no id() is reused
    rows = [measure(sizes, kept) for sizes in layouts]
    info = start_distributed(DistributedConfig(strategy="fsdp2", **layouts[0]), lora=True)
    row = {"rank": info.rank, "runs": rows} if isinstance(arg, list) else rows[0]
    (Path(sys.argv[2]) / f"rank{info.rank}.json").write_text(json.dumps(row))
    # leave the process group before exiting: gloo's threads torn down at interpreter
    # exit abort the process ("terminate called without an active exception")
    shutdown(info)


def measure(sizes: dict, kept: list[object]) -> dict:
    """One layout's row (the process group is joined once: start_distributed is
    idempotent, the layout is this call's)."""
    info = start_distributed(DistributedConfig(strategy="fsdp2", **sizes), lora=True)
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
    kept.append(learner)
    return {
        "rank": info.rank,
        "stage": learner.pmesh.coords.pp,
        "base": sum(nbytes(p) for n, p in params if "lora_" not in n),
        "lora": sum(nbytes(p) for n, p in params if "lora_" in n),
    }


if __name__ == "__main__":
    main()
