"""A torchrun worker: the bytes autograd saves per decoder layer on the mesh learner.

Run as ``python -m torch.distributed.run --nproc-per-node N parallel_activations.py SPEC
OUT`` (``SPEC``: JSON ``{"sizes": {...}, "checkpointing": bool, "batch": B, "seq_len":
S}``). Each rank builds the tiny DeepSeek-V3 with a rank-8 adapter on apply_lora's default
targets (every attention projection and the routed experts) on the mesh of ``sizes``,
runs one forward and backward of ``B`` sequences of ``S`` tokens (no padding) under
:class:`~agentgym.trainers.parallel.activations.SavedBytes`, and writes
``OUT/rank<r>.json``: ``{"rank", "layers": {index: bytes}, "outside", "tokens",
"grad_norm"}``.

``SPEC`` may be a JSON list of such specs (layouts of the same number of processes): one
start-up (the imports and the process group are most of a launch's time) measures each in
turn, on a model, adapter, mesh and learner of its own, and ``OUT/rank<r>.json`` is
``{"rank", "runs": [row, ...]}``, a row per spec in order.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from agentgym.generation import build_preset, build_tokenizer
from agentgym.trainers import LoraSettings, apply_lora
from agentgym.trainers.algorithm import selected_logprobs
from agentgym.trainers.batch import Sample, make_microbatches
from agentgym.trainers.config import AlgorithmConfig, DistributedConfig, OptimConfig
from agentgym.trainers.device import compute_dtype
from agentgym.trainers.distributed import shutdown, start_distributed
from agentgym.trainers.learner import Learner
from agentgym.trainers.parallel import MeshStrategy
from agentgym.trainers.parallel.activations import SavedBytes
from agentgym.trainers.parallel.tensor_parallel import decoder_layers


def make_samples(spec: dict, vocab: int, dp: int) -> list[Sample]:
    """``batch * micro_batches`` sequences of ``seq_len`` tokens per data-parallel rank."""
    g = torch.Generator().manual_seed(0)
    half = spec["seq_len"] // 2
    return [
        Sample(
            tuple(torch.randint(4, vocab, (half,), generator=g).tolist()),
            tuple(torch.randint(4, vocab, (spec["seq_len"] - half,), generator=g).tolist()),
            1.0 - 2.0 * (i % 2),
            i,
        )
        for i in range(spec["batch"] * dp * spec.get("micro_batches", 1))
    ]


def loss_fn(mb, logits):
    """A policy-gradient loss on the targets' log-probs (the trainer's, which takes logits
    split over the vocabulary under tensor parallelism)."""
    logp = selected_logprobs(logits, mb.targets)
    loss = -(logp * mb.advantages[:, None] * mb.loss_mask).sum() / mb.loss_mask.sum()
    return loss, {"loss": float(loss.detach())}


def build_model():
    """The tiny DeepSeek-V3 with a rank-8 adapter on apply_lora's default targets."""
    tokenizer = build_tokenizer()
    model = build_preset("tiny-deepseek-v3", tokenizer, seed=0)
    return apply_lora(model, LoraSettings(r=8), seed=1), tokenizer


def main() -> None:
    arg = json.loads(sys.argv[1])
    specs = arg if isinstance(arg, list) else [arg]
    kept: list[object] = []  # every learner lives to the end: no id() is reused
    rows = [measure(spec, kept) for spec in specs]
    info = start_distributed(DistributedConfig(strategy="fsdp2", **specs[0]["sizes"]), lora=True)
    row = {"rank": info.rank, "runs": rows} if isinstance(arg, list) else rows[0]
    (Path(sys.argv[2]) / f"rank{info.rank}.json").write_text(json.dumps(row))
    shutdown(info)


def measure(spec: dict, kept: list[object]) -> dict:
    """One spec's forward and backward on a fresh model: its row (the process group is
    joined once: start_distributed is idempotent, the layout is this spec's)."""
    info = start_distributed(DistributedConfig(strategy="fsdp2", **spec["sizes"]), lora=True)
    model, tokenizer = build_model()
    algo = AlgorithmConfig(micro_batch_size=spec["batch"], share_prompts=False)
    mesh = MeshStrategy(
        info, layout=info.layout, pad_id=tokenizer.pad_token_id,
        compute_dtype=compute_dtype(model), activation_checkpointing=spec["checkpointing"],
    )  # fmt: skip
    learner = Learner(
        model, algo, OptimConfig(), pad_id=tokenizer.pad_token_id, dist=info, strategy=mesh
    )
    samples = make_samples(spec, model.config.vocab_size, info.layout.dp)
    mbs = make_microbatches(samples, spec["batch"], tokenizer.pad_token_id)
    _, layers = decoder_layers(learner.model)
    counter = SavedBytes(learner.model, {i: m for i, m in enumerate(layers) if len(m._modules)})

    with counter.recording():
        learner.forward_backward(mbs, loss_fn)
    tokens = int(mbs[0].sequences()[0].numel())
    norm = learner.step()["grad_norm"]
    kept.append(learner)
    return {
        "rank": info.rank,
        "layers": counter.per_layer,
        "outside": counter.outside,
        "tokens": tokens,
        "grad_norm": norm,
    }


if __name__ == "__main__":
    main()
