"""Folding a peft LoRA adapter into the base weights while the HF engine generates.

With a LoRA adapter, an adapted layer runs three matmuls per forward (the base weight,
``lora_A``, ``lora_B``) plus peft's wrapper code. For the duration of a generation call,
:func:`merged_lora` replaces each adapted weight by a new tensor ``W + delta`` and takes
the wrappers out of the module tree, so the layer runs one matmul and no peft code; the
trainer's weights and modules are put back untouched afterwards (the original tensors,
not an un-merge). Log-probabilities then come from the folded weights, so they differ
from the learner's recomputation by float rounding only (about 1e-6; the trainer reports
it as ``charts/logprob_mismatch``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn


@contextlib.contextmanager
def merged_lora(model: nn.Module) -> Iterator[bool]:
    """Inside the block, the model computes the adapted function with the LoRA adapter
    folded into its weights; yields whether it could.

    For every peft LoRA layer (``lora.Linear`` and, for MoE experts, ``ParamWrapper``)
    the weight tensor is replaced by a new tensor ``W + delta`` (``delta`` from peft's
    ``get_delta_weight`` summed over the active adapters), so a forward pass runs one
    matmul per adapted layer. On exit the original
    tensors are put back (not un-merged by subtraction, which would not give back the
    same bits). The adapter wrappers are also taken out of the module tree for the
    block (each parent holds the wrapped layer directly) and put back on exit. Memory:
    one extra copy of the adapted weights while the block runs.

    Yields ``False`` and changes nothing when the model has no LoRA layers, is not a
    ``PeftModel``, has a layer kind or option this does not fold (DoRA and other
    variants, LoRA on embeddings or convolutions, LoRA biases), or has sharded weights
    (FSDP2, DeepSpeed ZeRO-3): the adapter then runs as usual.
    """
    try:
        from peft import PeftModel
        from peft.tuners.lora import LoraLayer
        from peft.tuners.lora.layer import Linear as LoraLinear
        from peft.tuners.lora.layer import ParamWrapper
    except ImportError:  # pragma: no cover - peft is a dependency
        yield False
        return
    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    if not layers or not isinstance(model, PeftModel):
        yield False
        return
    plan: list[tuple[nn.Parameter, list[tuple[Any, str]]]] = []
    by_param: dict[int, int] = {}
    for layer in layers:
        if type(layer) not in (LoraLinear, ParamWrapper):
            yield False
            return
        adapters = [a for a in layer.active_adapters if a in layer.lora_A]
        if any(
            a in getattr(layer, "lora_variant", {}) or getattr(layer, "lora_bias", {}).get(a)
            for a in adapters
        ):
            yield False
            return
        if layer.merged:
            yield False
            return
        if isinstance(layer, ParamWrapper):
            param = layer.get_param()
        else:
            param = layer.get_base_layer().weight
        if type(param.data) is not torch.Tensor or hasattr(param, "ds_id"):
            # a sharded parameter (FSDP2 DTensor, DeepSpeed ZeRO-3): leave it alone
            yield False
            return
        if id(param) not in by_param:
            by_param[id(param)] = len(plan)
            plan.append((param, []))
        plan[by_param[id(param)]][1].extend((layer, a) for a in adapters)
    # the outermost adapter wrappers and what they wrap (nested for several parameters)
    swaps = [
        (parent, name, child, child.get_base_layer())
        for parent in model.modules()
        if not isinstance(parent, LoraLayer)
        for name, child in parent.named_children()
        if isinstance(child, LoraLayer)
    ]
    saved: list[tuple[nn.Parameter, torch.Tensor]] = []
    swapped: list[tuple[nn.Module, str, nn.Module]] = []
    try:
        with torch.no_grad():
            for param, parts in plan:
                if not parts:
                    continue
                merged = param.data.clone()
                for layer, adapter in parts:
                    merged += layer.get_delta_weight(adapter).to(merged.dtype)
                saved.append((param, param.data))
                param.data = merged
        # the wrappers would only add Python overhead now: call the wrapped layers
        for parent, name, wrapper, base in swaps:
            setattr(parent, name, base)
            swapped.append((parent, name, wrapper))
        yield True
    finally:
        for parent, name, wrapper in reversed(swapped):
            setattr(parent, name, wrapper)
        for param, original in saved:
            param.data = original
