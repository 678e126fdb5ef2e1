"""Training precision: mixed precision and host copies of trained tensors.

Where a model is placed (``model.device``, ``model.dtype``: ``resolve_device``,
``resolve_dtype``, ``place_model``) is the generation layer's (``agentgym.generation``),
shared with the server and the engines. Here, what training adds:

* mixed precision (:func:`compute_dtype`, :func:`keep_master_weights`,
  :func:`autocast`): with a bfloat16 base, the trainable weights (LoRA, a critic's head,
  every weight in full fine-tuning) are float32 master copies and every training
  forward runs under bf16 autocast -- the convention of TRL and verl;
* :func:`host_copy`: tensors that leave the device (adapter exchange, checkpoints,
  digests) are copied to the host with ``.cpu()``, never read with ``.numpy()`` in place.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

import torch
from torch import nn

from agentgym import ConfigError

#: dtypes trained under autocast with float32 master weights
LOW_PRECISION = (torch.bfloat16, torch.float16)


def compute_dtype(model: nn.Module) -> torch.dtype | None:
    """The low-precision dtype the model's weights were placed in (bf16 / fp16), which
    training autocasts to; None for a float32 model. Read it before
    :func:`keep_master_weights` upcasts the trainable weights."""
    found = {p.dtype for p in model.parameters() if p.dtype in LOW_PRECISION}
    if len(found) > 1:
        raise ConfigError(
            f"the model mixes {sorted(str(d) for d in found)} weights: place it with one "
            "model.dtype."
        )
    return found.pop() if found else None


def keep_master_weights(model: nn.Module) -> int:
    """Cast every trainable floating parameter that is not float32 to float32 (the
    optimizer's master copy); returns how many were cast."""
    cast = 0
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad and p.is_floating_point() and p.dtype != torch.float32:
                p.data = p.data.float()
                cast += 1
    return cast


@contextlib.contextmanager
def autocast(device: torch.device, dtype: torch.dtype | None) -> Iterator[None]:
    """``torch.autocast`` to ``dtype`` on ``device``'s type; nothing for None."""
    if dtype is None:
        yield
        return
    with torch.autocast(device_type=device.type, dtype=dtype):
        yield


def host_copy(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detached host (CPU) copies of ``tensors``, whatever device they are on."""
    return {k: v.detach().to("cpu", copy=True) for k, v in tensors.items()}
