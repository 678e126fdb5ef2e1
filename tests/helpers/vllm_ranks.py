"""A torchrun worker (or one plain process): the vLLM engine living on the trainer's ranks.

Run as ``python -m torch.distributed.run --nproc-per-node 2 vllm_ranks.py OPTIONS OUT``, or
``python vllm_ranks.py OPTIONS OUT`` for the one-process reference (``OPTIONS``: the
engine's ``tensor_parallel_size`` / ``pipeline_parallel_size`` as JSON). Each rank joins a
gloo group first (as the trainer does), builds the same tiny Qwen2 with a rank-8 adapter
and the vLLM engine through ``make_engine`` (vLLM's CPU build, ``external_launcher``), then:

1. syncs the adapter (:class:`~agentgym.generation.AdapterSync`, each rank holding the
   whole adapter, as one process's learner does) and generates a batch of greedy replies,
   each replica its share of the requests (``engine.drive``);
2. plays two-turn episodes through the streaming policy, each episode starting a few
   engine steps after the one before, so second turns arrive while others decode;
3. changes the adapter, syncs again, and generates the batch again.

Every rank writes ``OUT/rank<r>.json``: on replica leaders their replies by request, the
arrivals seen (in flight at the moment each request entered), the sync's bytes, and the
bytes of adapter its worker holds.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import torch

from agentgym import Message, SamplingParams
from agentgym.generation import (
    AdapterShard,
    AdapterSync,
    GenerationRequest,
    adapter_state_dict,
    build_preset,
    build_tokenizer,
    make_engine,
)
from agentgym.trainers import LoraSettings, apply_lora

MODEL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "initializer_range": 0.3,  # peaked logits: greedy replies far from ties
}
OPTIONS = {
    "dtype": "float32",
    "enforce_eager": True,
    "max_model_len": 256,
    "kv_cache_memory_bytes": 32 * 2**20,
    "enable_prefix_caching": False,
}
GREEDY = SamplingParams(max_tokens=12, temperature=0.0)


class WholeAdapter:
    """A learner of one process, as the sync sees it: every tensor whole on every rank."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def adapter_shards(self) -> list[AdapterShard]:
        return [AdapterShard(k, v) for k, v in adapter_state_dict(self.model).items()]


def perturb(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)


def requests() -> list[GenerationRequest]:
    return [
        GenerationRequest((Message("user", f"Task {i}: add {i} and {3 * i + 1}."),), GREEDY)
        for i in range(6)
    ]


def batch(engine, reqs) -> dict[int, list[int]]:
    mine = engine.replicas.deal(list(enumerate(reqs)))
    out = engine.generate([r for _, r in mine]) if mine else []
    return {i: list(c.token_ids) for (i, _), c in zip(mine, out, strict=True)}


async def episodes(engine, policy, arrivals: list) -> dict[int, list[list[int]]]:
    """Two-turn episodes; this replica's k-th episode starts once its engine has made
    3 k steps (the first at once: while one is in flight, the engine steps)."""

    start = engine.decode_stats.decode_steps

    async def play(k: int, i: int) -> tuple[int, list[list[int]]]:
        while engine.decode_stats.decode_steps < start + 3 * k:
            await asyncio.sleep(0)
        first = [Message("user", f"Story {i}: once upon a time")]
        c1 = await policy(first, GREEDY)
        second = [*first, Message("assistant", c1.text), Message("user", "And then?")]
        c2 = await policy(second, GREEDY)
        return i, [list(c1.token_ids), list(c2.token_ids)]

    mine = engine.replicas.deal(list(range(6)))
    return dict(await asyncio.gather(*(play(k, i) for k, i in enumerate(mine))))


def main() -> None:
    options = {**OPTIONS, **json.loads(sys.argv[1])}
    out = Path(sys.argv[2])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        torch.distributed.init_process_group("gloo")
    tok = build_tokenizer()
    model = apply_lora(build_preset("tiny-qwen2", tok, seed=0, overrides=MODEL), LoraSettings(r=8))
    perturb(model, 3)
    engine = make_engine(
        "vllm",
        model=model,
        tokenizer=tok,
        workdir=out / "work",
        options=options,
        rank=rank,
        world_size=world,
        job=os.environ.get("MASTER_PORT", "solo"),
    )
    sync = AdapterSync(engine)
    source = WholeAdapter(model)
    stats = [vars(sync.push(source)).copy()]
    arrivals: list[tuple[str, int]] = []
    submit = engine.submit

    def logged(reqs):
        for r in reqs:
            arrivals.append((r.messages[-1].content, engine.in_flight))
        return submit(reqs)

    engine.submit = logged
    policy = engine.as_policy()
    row = {"rank": rank, "leads": engine.replicas.leads}
    row["batch1"] = engine.drive(lambda: batch(engine, requests()))
    row["turns"] = engine.drive(lambda: asyncio.run(episodes(engine, policy, arrivals)))
    perturb(model, 4)
    stats.append(vars(sync.push(source)).copy())
    row["batch2"] = engine.drive(lambda: batch(engine, requests()))
    row["arrivals"] = arrivals
    row["sync"] = [{k: v for k, v in s.items() if k != "history"} for s in stats]
    row["held_adapter_bytes"] = engine.held_adapter_bytes()
    row["adapter_bytes"] = sum(t.numel() * 4 for t in adapter_state_dict(model).values())
    (out / f"rank{rank}.json").write_text(json.dumps(row))
    policy.close()
    engine.close()
    if world > 1:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
    # everything this run reports is written and its engine closed: skip the interpreter's
    # teardown of vLLM's and torch's modules (~4.5 s and ~2.5 s of CPU per process here),
    # which no assertion reads. The atexit handlers are skipped too: they took 0.02 s, and
    # /tmp and /dev/shm keep the same leftovers (vLLM's sockets) either way
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
