"""LoRA layers computed as one matmul while the learner trains.

peft computes an adapted linear layer as ``x W^T + s (x A^T) B^T``: the base matmul,
two thin matmuls through the rank-``r`` bottleneck, a scaling and an addition, and as
many again in the backward pass. The same function is ``x (W + s B A)^T``, and its
gradients are

* ``dx = dy (W + s B A)``
* ``dB = s dy^T (x A^T)`` and ``dA = s (dy B)^T x``

so :class:`LoRAMatmul` runs one full-size matmul forward and one backward (on the
merged weight, rebuilt in the backward pass rather than kept, so no copy of the weights
lives between the passes) plus the thin matmuls the adapter's own gradients need.
:func:`fused_lora_forward` switches the adapted layers of a peft model to it for the
duration of a block; outside the block the model is peft's own, untouched.

It only takes over layers where it computes exactly what peft does: ``lora.Linear``
layers on a plain ``nn.Linear`` with one active adapter, no dropout, no variant (DoRA
and others), not merged, frozen base weights, unsharded tensors. Everything else (MoE
expert parameters, embeddings, a model under FSDP2 or ZeRO-3) runs peft's forward.
Loss and gradients match peft's to float rounding (tested to 1e-5).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class LoRAMatmul(torch.autograd.Function):
    """``x (W + s B A)^T + bias`` with gradients for ``x``, ``A`` and ``B`` only."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        lora_a: torch.Tensor,
        lora_b: torch.Tensor,
        scaling: float,
    ) -> torch.Tensor:
        x_a = x @ lora_a.t()  # [..., r], needed for dB
        ctx.save_for_backward(x, x_a, weight, lora_a, lora_b)
        ctx.scaling = scaling
        return F.linear(x, weight + (lora_b @ lora_a) * scaling, bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, x_a, weight, lora_a, lora_b = ctx.saved_tensors
        s = ctx.scaling
        grad_x = grad @ (weight + (lora_b @ lora_a) * s) if ctx.needs_input_grad[0] else None
        g2 = grad.reshape(-1, grad.shape[-1])
        grad_b = (g2.t() @ x_a.reshape(-1, x_a.shape[-1])) * s
        grad_a = ((g2 @ lora_b).t() @ x.reshape(-1, x.shape[-1])) * s
        return grad_x, None, None, grad_a, grad_b, None


def _fusable(layer: Any) -> tuple[nn.Parameter, nn.Parameter, float] | None:
    """``(A, B, scaling)`` of a peft LoRA Linear that :class:`LoRAMatmul` reproduces."""
    base = layer.get_base_layer()
    adapters = [a for a in layer.active_adapters if a in layer.lora_A]
    if len(adapters) != 1 or layer.merged or layer.disable_adapters:
        return None
    (name,) = adapters
    if name in getattr(layer, "lora_variant", {}) or getattr(layer, "lora_bias", {}).get(name):
        return None
    if type(base) is not nn.Linear or getattr(layer, "fan_in_fan_out", False):
        return None
    if not isinstance(layer.lora_dropout[name], nn.Identity):
        return None
    a, b = layer.lora_A[name].weight, layer.lora_B[name].weight
    tensors = [base.weight, a, b] + ([base.bias] if base.bias is not None else [])
    if base.weight.requires_grad or (base.bias is not None and base.bias.requires_grad):
        return None
    if any(type(t.data) is not torch.Tensor or hasattr(t, "ds_id") for t in tensors):
        return None  # sharded (FSDP2 DTensor, DeepSpeed ZeRO-3)
    if len({t.dtype for t in tensors}) != 1 or len({t.device for t in tensors}) != 1:
        return None
    return a, b, float(layer.scaling[name])


@contextlib.contextmanager
def fused_lora_forward(model: nn.Module) -> Iterator[int]:
    """Inside the block, the model's fusable LoRA layers (see the module docstring) run
    as :class:`LoRAMatmul`; yields how many layers it took over.

    Each layer's ``forward`` is replaced on the instance (the module tree, its hooks
    and its parameters stay as they are) and put back on exit.
    """
    try:
        from peft.tuners.lora.layer import Linear as LoraLinear
    except ImportError:  # pragma: no cover - peft is a dependency
        yield 0
        return
    patched: list[nn.Module] = []
    try:
        for module in model.modules():
            if type(module) is not LoraLinear or "forward" in vars(module):
                continue
            found = _fusable(module)
            if found is None:
                continue
            a, b, scaling = found
            base = module.get_base_layer()

            def forward(
                x: torch.Tensor,
                *args: Any,
                _base: nn.Linear = base,
                _a: nn.Parameter = a,
                _b: nn.Parameter = b,
                _s: float = scaling,
                _peft: Any = module.forward,
                **kwargs: Any,
            ) -> torch.Tensor:
                if args or kwargs or x.dtype != _base.weight.dtype:
                    return _peft(x, *args, **kwargs)  # anything unusual: peft's own path
                return LoRAMatmul.apply(x, _base.weight, _base.bias, _a, _b, _s)

            module.forward = forward
            patched.append(module)
        yield len(patched)
    finally:
        for module in patched:
            del module.forward
