"""Activation memory on the mesh: per-layer activation checkpointing, and its measurement.

:func:`checkpoint_layers` makes each decoder layer of a stage keep only its inputs for the
backward pass and run its forward again there (``torch.utils.checkpoint``, non-reentrant,
as torchtitan's ``apply_ac`` with ``mode: full``): ``distributed.activation_checkpointing``.
The layer's ``forward`` is replaced, not the module, so parameter names stay those of the
unsplit peft model (:class:`~.state.ParamMap` reads them), and FSDP2's hooks on the layer
stay outside the recomputed region (its parameters are gathered before the recompute,
as around any backward). Early stopping of the recompute is off: the recompute runs the
whole layer on every rank, so the collectives inside it (tensor-parallel, the experts'
all-to-all) line up across ranks.

:class:`SavedBytes` counts what autograd keeps for the backward pass, layer by layer
(``torch.autograd.graph.saved_tensors_hooks``): the bytes of each distinct storage saved
while a decoder layer runs its forward, parameters excluded (a saved weight or a view of
one costs nothing extra). With checkpointing the layer's inputs are what its checkpoint
saves; without, every tensor its operations save. The planner's activation figure is
checked against it (tests/trainers/test_parallel_plan.py).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn


def checkpoint_layers(layers: list[nn.Module]) -> None:
    """Recompute each of ``layers`` in the backward pass (see the module docstring)."""
    from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

    for layer in layers:
        inner = layer.forward

        def forward(self: nn.Module, *args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            with set_checkpoint_early_stop(False):
                return checkpoint(_inner, *args, use_reentrant=False, **kwargs)

        layer.forward = types.MethodType(forward, layer)
        layer._agentgym_checkpointed = True


def is_checkpointed(layer: nn.Module) -> bool:
    """Whether :func:`checkpoint_layers` wrapped ``layer``."""
    return bool(getattr(layer, "_agentgym_checkpointed", False))


def _storage_key(t: torch.Tensor) -> tuple[Any, ...] | None:
    """An identity of ``t``'s storage (None for tensors without one: meta, subclasses)."""
    if hasattr(t, "to_local"):  # a DTensor: its local shard is what this rank holds
        t = t.to_local()
    elem = getattr(t, "elem", None)  # a collective's result (AsyncCollectiveTensor)
    if isinstance(elem, torch.Tensor):
        t = elem
    try:
        storage = t.untyped_storage()
        return (t.device.type, storage.data_ptr(), storage.nbytes())
    except (RuntimeError, NotImplementedError):
        return None


class SavedBytes:
    """Bytes autograd saves for the backward pass, per decoder layer (module docstring).

    Args:
        model: the model whose parameters are not counted.
        layers: the decoder layers to attribute saves to, by index.

    Attributes:
        per_layer: layer index -> bytes first saved while that layer ran.
        outside: bytes saved outside every layer (embedding, head, loss).
    """

    def __init__(self, model: nn.Module, layers: dict[int, nn.Module]) -> None:
        self.layers = layers
        self.per_layer: dict[int, int] = dict.fromkeys(layers, 0)
        self.outside = 0
        self._params = {_storage_key(p) for p in model.parameters()}
        self._params |= {_storage_key(b) for b in model.buffers()}
        self._seen: set[tuple[Any, ...]] = set()
        self._current: list[int] = []

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        # a parameter, or a view of one (a transposed weight, an expert's slice): FSDP2's
        # gathered parameters are not the sharded ones ``model.parameters()`` lists
        base = t if t._base is None else t._base
        if isinstance(base, nn.Parameter):
            return t
        key = _storage_key(t)
        if key is not None and key not in self._params and key not in self._seen:
            self._seen.add(key)
            if self._current:
                self.per_layer[self._current[-1]] += key[2]
            else:
                self.outside += key[2]
        return t

    @contextlib.contextmanager
    def recording(self) -> Iterator[SavedBytes]:
        """Count the saves of the forward passes run inside the context."""
        handles = []
        for i, layer in self.layers.items():
            handles.append(layer.register_forward_pre_hook(lambda *_a, _i=i: self._enter(_i)))
            handles.append(layer.register_forward_hook(lambda *_a: self._leave()))
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
                yield self
        finally:
            for h in handles:
                h.remove()

    def _enter(self, index: int) -> None:
        self._current.append(index)

    def _leave(self) -> None:
        self._current.pop()
