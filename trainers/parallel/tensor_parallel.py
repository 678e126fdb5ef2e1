"""Tensor parallelism: DTensor plans for attention, dense MLPs, shared experts and the
embedding/head, with LoRA split consistently with the layer it adapts.

The plans are :mod:`torch.distributed.tensor.parallel` styles applied with
``parallelize_module``, per decoder layer:

==============================  ========================================================
module                          style
==============================  ========================================================
GQA ``q/k/v_proj``              colwise (heads split; whole key/value heads per rank)
MLA ``q_b_proj`` / ``q_proj``   colwise (heads split)
MLA ``kv_b_proj``               colwise (heads split)
MLA ``q_a_proj``,               replicated (the latent down-projections are small; their
``kv_a_proj_with_mqa``          outputs feed every head)
``o_proj``                      rowwise (partial sums all-reduced)
MLP / shared experts            ``gate/up_proj`` colwise, ``down_proj`` rowwise
``embed_tokens`` / ``lm_head``  vocabulary split (rowwise / colwise; the logits stay split
                                with loss parallelism, else gathered); replicated when
                                the two are tied
==============================  ========================================================

LoRA on a split layer (peft's ``lora.Linear``: ``y = x W^T + s (x A^T) B^T``) is split
so that it computes exactly the unsplit adapter: on a colwise layer ``B`` is split with
the base's output rows and ``A`` stays whole (``x A^T`` is the same on every rank); on a
rowwise layer ``A`` is split with the base's input columns and ``B`` stays whole (the
rank-``r`` partial sums are all-reduced, as the base's are). Routed experts are not
split here: :mod:`.experts` gives each rank whole experts.

One correction the plain styles need for MLA: the rotary part of ``kv_a_proj_with_mqa``'s
output (``k_rot``, shared by every head) reaches each rank's heads outside any split
module, so its gradient is a partial sum per rank; :func:`_sum_rope_key_grads` marks it
so that the backward pass all-reduces it (a DTensor ``Partial`` gradient).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from agentgym import ConfigError

COLWISE, ROWWISE = "colwise", "rowwise"


def decoder_layers(model: nn.Module) -> tuple[nn.Module, nn.ModuleList]:
    """The module holding ``layers`` (a ``ModuleList`` of decoder blocks) and the list."""
    for _, module in model.named_modules():
        layers = getattr(module, "layers", None)
        if isinstance(layers, nn.ModuleList) and len(layers) > 0:
            return module, layers
    raise ConfigError(
        "tensor/expert/pipeline parallelism: could not find the model's decoder layers (a "
        "ModuleList named `layers`); this architecture is not supported."
    )


def layer_plan(layer: nn.Module) -> dict[str, str]:
    """Which Linear of one decoder layer is split how (paths relative to the layer)."""
    plan: dict[str, str] = {}
    attn = getattr(layer, "self_attn", None)
    if attn is None:
        raise ConfigError("tensor parallelism: a decoder layer has no `self_attn` module.")
    names = {n for n, _ in attn.named_children()}
    if "kv_a_proj_with_mqa" in names:  # DeepSeek multi-head latent attention
        for name in ("q_b_proj", "q_proj", "kv_b_proj"):
            if getattr(attn, name, None) is not None:
                plan[f"self_attn.{name}"] = COLWISE
    else:
        for name in ("q_proj", "k_proj", "v_proj"):
            plan[f"self_attn.{name}"] = COLWISE
    plan["self_attn.o_proj"] = ROWWISE
    mlp = getattr(layer, "mlp", None)
    for prefix, block in (
        ("mlp", mlp),
        ("mlp.shared_experts", getattr(mlp, "shared_experts", None)),
    ):
        if block is not None and all(
            hasattr(block, n) for n in ("gate_proj", "up_proj", "down_proj")
        ):
            plan[f"{prefix}.gate_proj"] = COLWISE
            plan[f"{prefix}.up_proj"] = COLWISE
            plan[f"{prefix}.down_proj"] = ROWWISE
    return plan


def _styles(module: nn.Module, path: str, how: str) -> dict[str, Any]:
    """The DTensor styles for one Linear (or a peft LoRA Linear around one)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    style = ColwiseParallel if how == COLWISE else RowwiseParallel
    target = module.get_submodule(path)
    if not hasattr(target, "lora_A") or not hasattr(target, "base_layer"):
        return {path: style()}
    out: dict[str, Any] = {f"{path}.base_layer": style()}
    for adapter in target.lora_A:
        if how == COLWISE:  # B split with the output rows, A whole
            out[f"{path}.lora_B.{adapter}"] = ColwiseParallel()
        else:  # A split with the input columns, B whole
            out[f"{path}.lora_A.{adapter}"] = RowwiseParallel()
    return out


def _sum_grads(x: torch.Tensor, tp_mesh: Any) -> torch.Tensor:
    """``x`` unchanged; in the backward pass its gradient is summed over ``tp_mesh``."""
    from torch.distributed.tensor import DTensor, Partial, Replicate

    d = DTensor.from_local(x, tp_mesh, [Replicate()], run_check=False)
    return d.to_local(grad_placements=[Partial()])


def _sum_rope_key_grads(attn: nn.Module, tp_mesh: Any) -> None:
    """Hook ``kv_a_proj_with_mqa`` so that the rotary key's gradient is all-reduced."""
    kv_rank = int(attn.kv_lora_rank)

    def hook(_module: nn.Module, _inputs: Any, out: torch.Tensor) -> torch.Tensor:
        latent, rope = out[..., :kv_rank], out[..., kv_rank:]
        return torch.cat([latent, _sum_grads(rope, tp_mesh)], dim=-1)

    attn.kv_a_proj_with_mqa.register_forward_hook(hook)


def apply_tensor_parallel(
    model: nn.Module, tp_mesh: Any, layers: list[nn.Module], *, loss_parallel: bool = False
) -> None:
    """Split ``layers`` (this stage's decoder layers) and the embedding/head of ``model``
    (the Hugging Face causal LM, not the peft wrapper) over ``tp_mesh``. ``loss_parallel``:
    the head's logits stay split over the vocabulary (a DTensor sharded on its last
    dimension, which :func:`~agentgym.trainers.algorithm.selected_logprobs` and
    :func:`~agentgym.trainers.algorithm.token_entropy` reduce slice by slice) instead of
    gathered whole on every rank."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    for layer in layers:
        plan: dict[str, Any] = {}
        for path, how in layer_plan(layer).items():
            plan.update(_styles(layer, path, how))
        parallelize_module(layer, tp_mesh, plan)
        attn = layer.self_attn
        if hasattr(attn, "kv_a_proj_with_mqa"):
            _sum_rope_key_grads(attn, tp_mesh)
    tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
    if tied:
        return
    root, _ = decoder_layers(model)
    top: dict[str, Any] = {}
    embed = getattr(root, "embed_tokens", None)
    if isinstance(embed, nn.Embedding):
        path = next(n for n, m in model.named_modules() if m is embed)
        top[path] = RowwiseParallel(input_layouts=Replicate())
    head = getattr(model, "lm_head", None)
    if isinstance(head, nn.Linear):
        top["lm_head"] = (
            ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)
            if loss_parallel
            else ColwiseParallel(output_layouts=Replicate())
        )
    if top:
        parallelize_module(model, tp_mesh, top)
