"""A torchrun worker: one rank loading its share of a checkpoint and training 2 steps.

Run as ``python -m torch.distributed.run --nproc-per-node N loading_probe.py SIZES CKPT
OUT [--quantize Q] [--train CKPT2] [--old]`` (``SIZES``: the ``distributed`` layout as
JSON, e.g. ``{"ep": 2}``; ``{}`` with one process). Each rank

1. warms up (imports, a meta model built and dropped), then notes its resident memory;
2. builds the model on meta with a rank-4 adapter and a mesh :class:`Learner`, which
   reads the rank's share of ``CKPT`` (:mod:`agentgym.trainers.loading`);
3. notes its peak resident memory, the bytes its readers read and the bytes it holds;
4. trains two steps on fixed micro-batches (:func:`probe_batches`, :func:`probe_loss`),
   on ``CKPT2`` when given (a small model: the memory is measured on a large one)

and writes ``OUT/rank<r>.json``: ``baseline_rss``, ``peak_rss``, ``share_bytes``,
``bytes_read``, ``losses``, ``grad_norms``.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import random
import resource
import time
from pathlib import Path
from typing import Any

import torch

LORA = {"r": 4, "alpha": 8.0}
LORA_SEED = 5


def probe_batches(vocab: int, pad_id: int) -> list[Any]:
    """12 samples (3 prompts x 4 replies) in micro-batches of 4."""
    from agentgym.trainers.batch import Sample, make_microbatches

    rng = random.Random(0)
    samples = []
    for task, plen in enumerate([5, 9, 7]):
        prompt = tuple(rng.randrange(4, vocab) for _ in range(plen))
        for g in range(4):
            reply = tuple(rng.randrange(4, vocab) for _ in range(rng.randint(2, 8)))
            samples.append(Sample(prompt, reply, rng.gauss(0.0, 1.0), task * 4 + g))
    return make_microbatches(samples, 4, pad_id)


def probe_loss(total_tokens: float) -> Any:
    """A policy-gradient loss over the mini-batch's tokens (its sum over the micro-batches
    is the loss of the whole mini-batch)."""

    def fn(mb: Any, logits: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        if hasattr(logits, "full_tensor"):  # vocabulary-split logits (loss parallelism)
            logits = logits.full_tensor()
        logp = torch.log_softmax(logits, -1).gather(-1, mb.targets[..., None])[..., 0]
        loss = -(logp * mb.advantages[:, None] * mb.loss_mask).sum() / total_tokens
        return loss, {"loss": float(loss.detach())}

    return fn


def train_two_steps(learner: Any, vocab: int, pad_id: int) -> tuple[list[float], list[float]]:
    """Two optimizer steps on :func:`probe_batches`; the losses and gradient norms."""
    mbs = probe_batches(vocab, pad_id)
    total = float(sum(mb.loss_mask.sum() for mb in mbs))
    losses, norms = [], []
    for _ in range(2):
        stats = learner.forward_backward(mbs, probe_loss(total))
        losses.append(stats["loss"])
        norms.append(learner.step()["grad_norm"])
    return losses, norms


def rss_bytes() -> int:
    """This process's resident memory now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> None:
    """Count the peak resident memory (``VmHWM``) from now on: what came before (the
    imports; a forked rank's launcher, whose peak a fork hands down) must not count."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # an old kernel: the peak since the start, as getrusage gives it
        pass


def peak_rss_bytes() -> int:
    """The peak resident memory since :func:`reset_peak_rss` (or the process's start)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _learner(args: Any, info: Any, ckpt: str, quantize: str) -> tuple[Any, Any]:
    """The learner of ``ckpt`` on this rank: read by :mod:`agentgym.trainers.loading`
    (a mesh: the rank's share; one process: the whole model), or with ``--old`` the way
    it was before (``from_pretrained`` on every rank, cast, a deep copy cut by the mesh)."""
    from agentgym.generation import load_model, place_model
    from agentgym.trainers.config import AlgorithmConfig, LoraSettings, ModelConfig, OptimConfig
    from agentgym.trainers.learner import Learner
    from agentgym.trainers.models import apply_lora, build_on_meta
    from agentgym.trainers.parallel import MeshStrategy

    lora = LoraSettings(**LORA)
    cfg = ModelConfig(path=ckpt, preset=None, device="cpu", dtype="float32", quantize=quantize)
    if args.old:
        model, tok = load_model(ckpt)
        model = apply_lora(place_model(model, cfg), lora, seed=LORA_SEED)
    else:
        model, tok = build_on_meta(
            cfg, lora, lora_seed=LORA_SEED, backend="gloo", mesh=info.layout is not None
        )
        if info.layout is None and quantize == "fp8":  # as the trainer's loop does
            from agentgym.trainers.parallel import quantize_base

            quantize_base(model, "fp8", dense=False)  # LoRA on the checkpoint's fp8 experts
    kw = {"pad_id": tok.pad_token_id, "dist": info}
    algo, optim = AlgorithmConfig(micro_batch_size=4), OptimConfig(lr=1e-2)
    if info.layout is None:
        return Learner(model, algo, optim, **kw), tok
    mesh = MeshStrategy(info, layout=info.layout, pad_id=tok.pad_token_id)
    return Learner(model, algo, optim, strategy=mesh, **kw), tok


def main() -> None:
    import argparse

    from agentgym.trainers.config import DistributedConfig, LoraSettings
    from agentgym.trainers.distributed import shutdown, start_distributed
    from agentgym.trainers.hf_reader import CheckpointReader
    from agentgym.trainers.loading import local_bytes, meta_model_and_tokenizer
    from agentgym.trainers.models import apply_lora_on_meta

    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", type=json.loads)
    parser.add_argument("ckpt")
    parser.add_argument("out", type=Path)
    parser.add_argument("--quantize", default="none")
    parser.add_argument("--train", help="train on this (smaller) checkpoint instead")
    parser.add_argument("--old", action="store_true", help="the loading path before")
    args = parser.parse_args()
    torch.set_num_threads(1)
    info = start_distributed(DistributedConfig(strategy="fsdp2", **args.sizes), lora=True)
    warm, _ = meta_model_and_tokenizer(args.ckpt)  # imports, lazy modules: off the count
    apply_lora_on_meta(warm, LoraSettings(**LORA), seed=0)
    for name in ("torch.distributed.fsdp", "torch.distributed.tensor.parallel"):
        importlib.import_module(name)
    del warm
    gc.collect()
    baseline = rss_bytes()
    reset_peak_rss()
    t = time.monotonic()
    learner, tok = _learner(args, info, args.ckpt, args.quantize)
    row = {
        "rank": info.rank,
        "baseline_rss": baseline,
        "peak_rss": peak_rss_bytes(),
        "load_s": time.monotonic() - t,
        "share_bytes": local_bytes(learner.model),
        "bytes_read": CheckpointReader.process_bytes_read,
    }
    if args.train:
        del learner
        gc.collect()
        learner, tok = _learner(args, info, args.train, args.quantize)
    t = time.monotonic()
    row["losses"], row["grad_norms"] = train_two_steps(learner, len(tok), tok.pad_token_id)
    row["train_s"] = time.monotonic() - t
    (args.out / f"rank{info.rank}.json").write_text(json.dumps(row))
    if info.distributed:
        shutdown(info)  # leave the process group before exiting (gloo's threads)


if __name__ == "__main__":
    main()
