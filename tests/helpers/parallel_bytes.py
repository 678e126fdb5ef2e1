"""A torchrun worker: the bytes one rank of the mesh learner holds, as a JSON line.

Run as ``python -m torch.distributed.run --nproc-per-node N parallel_bytes.py SIZES OUT``
(``SIZES``: the ``distributed`` layout as JSON, e.g. ``{"ep": 2}``). Each rank builds the
tiny DeepSeek-V3 with a rank-8 adapter on apply_lora's default targets, splits it over the
mesh (activation checkpointing on), and writes ``OUT/rank<r>.json``: ``{"rank", "stage",
"base", "lora"}``, the bytes of its shares of the frozen base and of the adapter (DTensors
by their local shard), then runs one training call of :data:`BATCH` sequences of
:data:`SEQ_LEN` tokens (half prompt, half reply) and an optimizer step and adds
``"grads"``, ``"optimizer"`` (its AdamW state) and ``"saved"`` (bytes autograd kept per
decoder layer), measured with the functions the dry run measures with
(:mod:`agentgym.trainers.dry_run.meter`), so that the two compare number for number.

``SIZES`` may be a JSON list of layouts of the same number of processes: one start-up (the
imports and the process group are most of a launch's time) builds each in turn, a model,
adapter, mesh and learner of its own, and ``OUT/rank<r>.json`` is ``{"rank", "runs":
[row, ...]}``, a row per layout in order.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from parallel_activations import loss_fn, make_samples

from agentgym.generation import build_preset, build_tokenizer
from agentgym.trainers import LoraSettings, apply_lora
from agentgym.trainers.batch import make_microbatches
from agentgym.trainers.config import AlgorithmConfig, DistributedConfig, OptimConfig
from agentgym.trainers.device import compute_dtype
from agentgym.trainers.distributed import shutdown, start_distributed
from agentgym.trainers.dry_run.meter import grad_bytes, optimizer_bytes, share_bytes
from agentgym.trainers.learner import Learner
from agentgym.trainers.parallel import MeshStrategy
from agentgym.trainers.parallel.activations import SavedBytes
from agentgym.trainers.parallel.tensor_parallel import decoder_layers

#: the training call's micro-batch: sequences, and tokens per sequence
BATCH, SEQ_LEN = 2, 64


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
    tokenizer = build_tokenizer()
    model = build_preset("tiny-deepseek-v3", tokenizer, seed=0)
    model = apply_lora(model, LoraSettings(r=8), seed=1)
    mesh = MeshStrategy(
        info, layout=info.layout, pad_id=tokenizer.pad_token_id,
        compute_dtype=compute_dtype(model), activation_checkpointing=True,
    )  # fmt: skip
    learner = Learner(
        model, AlgorithmConfig(micro_batch_size=BATCH, share_prompts=False), OptimConfig(),
        pad_id=tokenizer.pad_token_id, dist=info, strategy=mesh,
    )  # fmt: skip
    kept.append(learner)
    params = list(learner.model.named_parameters())
    shares = share_bytes(learner.model)
    row = {
        "rank": info.rank,
        "stage": mesh.pmesh.coords.pp,
        "base": sum(_nbytes(p) for n, p in params if "lora_" not in n),
        "lora": sum(_nbytes(p) for n, p in params if "lora_" in n),
        "share": shares,
    }
    spec = {"seq_len": SEQ_LEN, "batch": BATCH}
    samples = make_samples(spec, model.config.vocab_size, info.layout.dp)
    mbs = make_microbatches(samples, BATCH, tokenizer.pad_token_id)
    _, layers = decoder_layers(learner.model)
    counter = SavedBytes(learner.model, {i: m for i, m in enumerate(layers) if len(m._modules)})
    with counter.recording():
        learner.forward_backward(mbs, loss_fn)
    row["grads"] = grad_bytes(learner.model)
    learner.optimizer.step()
    row["optimizer"] = optimizer_bytes(learner.optimizer)
    row["saved"] = counter.per_layer
    return row


def _nbytes(t: object) -> int:
    t = t.to_local() if hasattr(t, "to_local") else t
    return t.numel() * t.element_size()


if __name__ == "__main__":
    main()
