"""The trainer's ``model`` section made real: the policy model and its tokenizer, read
(rank by rank on a mesh, fp8 scales applied) or built, placed, with its LoRA adapter and
a quantized frozen base (``model.quantize``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from agentgym import derive_seed
from agentgym.generation import place_model
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.distributed import DistInfo
from agentgym.trainers.env_setup import env_corpus
from agentgym.trainers.models import (
    apply_lora,
    build_model_and_tokenizer,
    build_on_meta,
    loads_on_meta,
)


def build_policy_model(
    cfg: TrainConfig, dist: DistInfo, say: Callable[[str], None]
) -> tuple[torch.nn.Module, Any]:
    """The policy model and its tokenizer for this rank.

    On a device mesh with ``model.path`` (or a block-fp8 checkpoint to keep quantized) the
    model is built on the meta device and each rank reads only its share later
    (:func:`~.models.build_on_meta`); otherwise it is read or built whole, placed (device,
    dtype) and given its adapter. ``model.quantize`` then quantizes the frozen base under
    the adapter, the dense weights too only where tensor parallelism does not split them.
    """
    mesh, seed = dist.layout is not None, derive_seed("lora", cfg.run.seed)
    meta = loads_on_meta(cfg.model, mesh=mesh)  # read per rank, fp8 scales applied
    if meta:
        lora = cfg.lora if cfg.lora.enabled else None
        model, tokenizer = build_on_meta(
            cfg.model, lora, lora_seed=seed, backend=dist.backend, mesh=mesh
        )
    else:
        model, tokenizer = build_model_and_tokenizer(
            cfg.model, corpus=lambda: env_corpus(cfg.envs, seed_start=cfg.train_seed_start)
        )
        model = place_model(model, cfg.model, backend=dist.backend)  # device, dtype
        if cfg.lora.enabled:
            model = apply_lora(model, cfg.lora, seed=seed)
    if cfg.model.quantize != "none" and not (meta and mesh):  # torchao under the LoRA
        from agentgym.trainers.parallel import quantize_base

        dense = not meta and cfg.distributed.tp == 1  # tp splits dense weights
        say(quantize_base(model, cfg.model.quantize, dense=dense).describe())
    return model, tokenizer
