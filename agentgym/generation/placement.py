"""Where a model computes and in which precision: ``model.device`` / ``model.dtype``.

:func:`place_model` casts a model's floating parameters and moves it; :func:`resolve_device`
and :func:`resolve_dtype` turn the settings (``auto``, ``cpu``, ``cuda:N``; ``auto``,
``float32``, ``bfloat16``, ``float16``) into torch's. The trainer (``model:`` section), the
server and the ``hf:`` policies place models the same way.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from agentgym import ConfigError

#: ``model.dtype`` names -> torch dtypes (``auto`` is resolved by :func:`resolve_dtype`)
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}


#: float8 storage dtypes: values that need their scales (never cast on their own)
FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def resolve_device(setting: str = "auto", backend: str = "none") -> torch.device:
    """The device this process trains on, from ``model.device`` and the process group's
    backend (``none`` for a single process, ``gloo`` or ``nccl``).

    ``auto``: ``cuda:LOCAL_RANK`` when CUDA is present (unless the backend is gloo, which
    runs the sharded strategies on CPU), else ``cpu``. ``cuda``: ``cuda:LOCAL_RANK``.
    ``cuda:N``: that GPU (one process only). The GPU chosen becomes the current one.

    Raises:
        ConfigError: a GPU asked for where torch sees none; ``cpu`` with nccl (which moves
            CUDA tensors only); a GPU with gloo; ``cuda:N`` with several processes.
    """
    local = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if setting == "cpu":
        if backend == "nccl":
            raise ConfigError(
                "model.device is cpu but distributed.backend is nccl, which moves CUDA tensors "
                "only: set distributed.backend=gloo, or model.device=auto."
            )
        return torch.device("cpu")
    cuda = torch.cuda.is_available()
    if setting == "auto":
        if not cuda or backend == "gloo":
            return torch.device("cpu")
        return _cuda(local)
    if not setting.startswith("cuda"):
        raise ConfigError(f"model.device must be auto, cpu, cuda or cuda:N, got {setting!r}.")
    if not cuda:
        raise ConfigError(
            f"model.device is {setting} but torch sees no GPU (torch.cuda.is_available() is "
            "False): check the driver and CUDA_VISIBLE_DEVICES and that torch is a CUDA "
            "build, or set model.device=cpu."
        )
    if backend == "gloo":
        raise ConfigError(
            "distributed.backend gloo trains the sharded strategies on CPU: set "
            "distributed.backend=nccl (or auto) for GPUs, or model.device=cpu."
        )
    if ":" in setting:
        if world > 1:
            raise ConfigError(
                f"model.device {setting} names one GPU but this run has {world} processes: "
                "use model.device=cuda (or auto): each rank takes cuda:LOCAL_RANK."
            )
        return _cuda(int(setting.split(":", 1)[1]))
    return _cuda(local)


def _cuda(index: int) -> torch.device:
    count = torch.cuda.device_count()
    if index >= count:
        raise ConfigError(
            f"this process wants GPU {index} but torch sees {count}: start at most {count} "
            "processes per node (--nproc), or widen CUDA_VISIBLE_DEVICES."
        )
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def resolve_dtype(setting: str, device: torch.device) -> torch.dtype:
    """The base weights' dtype from ``model.dtype`` (``auto``: bfloat16 on a GPU that
    supports it, float32 otherwise)."""
    if setting == "auto":
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if bf16 else torch.float32
    if setting not in DTYPES:
        raise ConfigError(f"model.dtype must be auto, {' or '.join(DTYPES)}, got {setting!r}.")
    return DTYPES[setting]


def place_model(model: nn.Module, cfg: Any = None, *, backend: str = "none") -> nn.Module:
    """Cast the model's floating parameters to ``model.dtype`` and move it to
    ``model.device`` (see :func:`resolve_device`); returns the same module. ``cfg`` is
    anything with ``device`` and ``dtype`` settings (the trainer's ``model`` section);
    ``None``: both ``auto``.

    Buffers keep their dtype (rotary frequencies, router biases stay float32). Call it
    before LoRA is applied, so that peft creates the adapter on the base's device. A
    model built on the meta device (the trainer's rank-by-rank loading) gets the dtype and keeps its meta
    tensors there (they are allocated where they are read); its other buffers move.

    Raises:
        ConfigError: a float8 weight: its values mean nothing without their block scales,
            so it is never cast (DeepSeek's fp8 checkpoints load through the trainer's ``model.path``).
    """
    device = resolve_device(cfg.device if cfg is not None else "auto", backend)
    dtype = resolve_dtype(cfg.dtype if cfg is not None else "auto", device)
    float8 = [n for n, p in model.named_parameters() if p.dtype in FLOAT8]
    if float8:
        raise ConfigError(
            f"the model holds float8 weights ({float8[0]}, ...) whose block scales live in "
            "other tensors: casting them to another dtype would drop the scales. Load the "
            "fp8 checkpoint through agentgym (build_model_and_tokenizer / model.path), which "
            "applies the scales, instead of from_pretrained's fp8 modules."
        )
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and p.dtype != dtype:
                p.data = p.data.to(dtype)
    if any(p.is_meta for p in model.parameters()):
        for m in model.modules():
            for name, b in m._buffers.items():
                if b is not None and not b.is_meta:
                    m._buffers[name] = b.to(device)
        return model
    return model.to(device)
