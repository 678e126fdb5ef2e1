"""A torchrun worker: the memory one rank takes while the adapter moves to rank 0.

Run as ``python -m torch.distributed.run --nproc-per-node N parallel_sync.py SIZES OUT``
(``SIZES``: the ``distributed`` layout as JSON). Each rank builds the tiny DeepSeek-V3 with
a rank-16 adapter on apply_lora's default targets on the mesh, and measures, under
``torch.profiler`` with ``profile_memory`` (every CPU allocation and free of torch's
allocator; the peak of their running sum), the extra bytes it allocates during:

* ``sync``: ``learner.state_dict()["adapter"]`` (what a checkpoint and an engine's
  adapter file read: the whole adapter on rank 0, streamed tensor by tensor);
* ``digest``: ``learner.adapter_digest()``;
* ``gather_all``: the whole adapter gathered on every rank (what the sync did before).

It writes ``OUT/rank<r>.json``: those peaks, the adapter's bytes, the digest, the number
of tensors it received, and on rank 0 whether the streamed adapter equals the gathered
one and the dtype of a bf16 stream.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from agentgym.generation import build_preset, build_tokenizer, tensors_digest
from agentgym.trainers import LoraSettings, apply_lora
from agentgym.trainers.config import AlgorithmConfig, DistributedConfig, OptimConfig
from agentgym.trainers.distributed import shutdown, start_distributed
from agentgym.trainers.learner import Learner
from agentgym.trainers.parallel import MeshStrategy


def peak_bytes(fn: Callable[[], Any]) -> tuple[int, Any]:
    """The peak of the running sum of torch's CPU allocations while ``fn`` runs."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    current = peak = 0
    for e in events:
        current += e.nbytes()
        peak = max(peak, current)
    return peak, out


def main() -> None:
    info = start_distributed(
        DistributedConfig(strategy="fsdp2", **json.loads(sys.argv[1])), lora=True
    )
    tokenizer = build_tokenizer()
    model = apply_lora(build_preset("tiny-deepseek-v3", tokenizer, seed=0), LoraSettings(r=16))
    mesh = MeshStrategy(info, layout=info.layout, pad_id=0)
    learner = Learner(model, AlgorithmConfig(), OptimConfig(), pad_id=0, dist=info, strategy=mesh)
    names = sorted(n for n in mesh.params.shapes if "lora_" in n)
    adapter = sum(
        torch.Size(mesh.params.shapes[n][0]).numel()
        * torch.empty(0, dtype=mesh.params.shapes[n][1]).element_size()
        for n in names
    )
    learner.state_dict()  # warm-up: peft's key lookup, first collectives
    sync, state = peak_bytes(lambda: learner.state_dict()["adapter"])
    digest_peak, digest = peak_bytes(learner.adapter_digest)
    gather_peak, whole = peak_bytes(lambda: mesh.params.gather(names))
    row: dict[str, Any] = {
        "rank": info.rank,
        "adapter_bytes": adapter,
        "sync": sync,
        "digest": digest_peak,
        "gather_all": gather_peak,
        "sha256": digest,
        "received": len(state),
    }
    if info.rank == 0:
        from peft import get_peft_model_state_dict

        keyed = get_peft_model_state_dict(mesh.gen_model, state_dict=whole)
        row["equal"] = set(keyed) == set(state) and all(
            torch.equal(keyed[k].cpu(), state[k]) for k in keyed
        )
        row["gathered_sha256"] = tensors_digest(keyed)
        bf16 = dict(mesh.adapter_pieces(dtype=torch.bfloat16))
        row["bf16"] = sorted({str(t.dtype) for t in bf16.values()})
    else:
        list(mesh.adapter_pieces(dtype=torch.bfloat16))  # its part of the collectives
    (Path(sys.argv[2]) / f"rank{info.rank}.json").write_text(json.dumps(row))
    shutdown(info)


if __name__ == "__main__":
    main()
