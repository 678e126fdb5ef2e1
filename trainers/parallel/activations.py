"""Activation memory on the mesh: per-layer activation checkpointing, and its measurement.

:func:`checkpoint_layers` makes each decoder layer of a stage keep only its inputs for the
backward pass and run its forward again there (``torch.utils.checkpoint``, non-reentrant,
as torchtitan's ``apply_ac`` with ``mode: full``): ``distributed.activation_checkpointing``.
The layer's ``forward`` is replaced, not the module, so parameter names stay those of the
unsplit peft model (:class:`~.state.ParamMap` reads them), and FSDP2's hooks on the layer
stay outside the recomputed region (its parameters are gathered before the recompute,
as around any backward). Early stopping of the recompute is off: the recompute runs the
whole layer on every rank, so the collectives inside it (tensor-parallel, the experts'
all-to-all) line up across ranks. Under tensor parallelism the ``tp`` ranks hold the same
layer inputs: each keeps only its ``1 / tp`` slice of them, all-gathered when the
recompute reads them (:func:`_split_saved`).

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
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

#: :class:`SavedBytes` counters recording now (the split inputs are counted by them)
_RECORDING: list[SavedBytes] = []


def checkpoint_layers(layers: list[nn.Module], tp_group: Any = None) -> None:
    """Recompute each of ``layers`` in the backward pass (see the module docstring).

    ``tp_group``: the tensor-parallel group, whose ranks hold the same layer inputs: each
    keeps only its ``1 / tp`` slice of them (:func:`_split_saved`), all-gathered when the
    backward pass recomputes the layer."""
    from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

    for layer in layers:
        inner = layer.forward

        def forward(self: nn.Module, *args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            split = _split_saved(tp_group) if tp_group is not None else contextlib.nullcontext()
            with set_checkpoint_early_stop(False), split:
                return checkpoint(_inner, *args, use_reentrant=False, **kwargs)

        layer.forward = types.MethodType(forward, layer)
        layer._agentgym_checkpointed = True


def _split_saved(group: Any) -> Any:
    """Saved-tensor hooks that keep this rank's ``1 / n`` slice of each floating tensor a
    checkpoint saves (its layer's inputs, the same on the ``n`` ranks of ``group``) and
    all-gather the slices when the recompute reads them: the checkpointed inputs split
    over the tensor-parallel ranks (Megatron's distributed saved activations; what the
    planner's sequence-parallel layer inputs count)."""
    import torch.distributed as dist

    n, rank = dist.get_world_size(group), dist.get_rank(group)

    def pack(t: torch.Tensor) -> Any:
        if not t.is_floating_point() or t.numel() < n or hasattr(t, "device_mesh"):
            return t
        flat = t.detach().reshape(-1)
        width = -(-flat.numel() // n)
        part = torch.zeros(width, dtype=flat.dtype, device=flat.device)
        mine = flat[rank * width : (rank + 1) * width]
        part[: mine.numel()] = mine
        for counter in _RECORDING:
            counter.count(part)
        return (part, t.shape, t.requires_grad)

    def unpack(packed: Any) -> torch.Tensor:
        if isinstance(packed, torch.Tensor):
            return packed
        part, shape, grad = packed
        parts = [torch.empty_like(part) for _ in range(n)]
        dist.all_gather(parts, part, group=group)
        numel = torch.Size(shape).numel()
        return torch.cat(parts)[:numel].view(shape).requires_grad_(grad)

    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


def is_checkpointed(layer: nn.Module) -> bool:
    """Whether :func:`checkpoint_layers` wrapped ``layer``."""
    return bool(getattr(layer, "_agentgym_checkpointed", False))


def _storage_key(t: torch.Tensor) -> tuple[Any, ...] | None:
    """An identity of ``t``'s storage (None for tensors without one: meta, subclasses);
    fake tensors (a dry run) have one each, without memory."""
    if hasattr(t, "to_local"):  # a DTensor: its local shard is what this rank holds
        t = t.to_local()
    elem = getattr(t, "elem", None)  # a collective's result (AsyncCollectiveTensor)
    if isinstance(elem, torch.Tensor):
        t = elem
    try:
        storage = t.untyped_storage()  # its C++ object: also a dry run's fake storages
        return (t.device.type, storage._cdata, storage.nbytes())
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
        #: storages counted, forgotten when freed (a later storage at the same address,
        #: the next micro-batch's under pipelining, counts again)
        self._seen: dict[tuple[Any, ...], Any] = {}
        self._current: list[int] = []

    def count(self, t: torch.Tensor) -> None:
        """Count ``t`` (a slice a checkpoint keeps instead of its whole input)."""
        key = _storage_key(t)
        if key is not None and key not in self._seen and self._current:
            self._remember(key, t)
            self.per_layer[self._current[-1]] += key[2]

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        # a parameter, or a view of one (a transposed weight, an expert's slice): FSDP2's
        # gathered parameters are not the sharded ones ``model.parameters()`` lists
        base = t if t._base is None else t._base
        if isinstance(base, nn.Parameter):
            return t
        key = _storage_key(t)
        if key is not None and key not in self._params and key not in self._seen:
            self._remember(key, t)
            if self._current:
                self.per_layer[self._current[-1]] += key[2]
            else:
                self.outside += key[2]
        return t

    def _remember(self, key: tuple[Any, ...], t: torch.Tensor) -> None:
        if hasattr(t, "to_local"):
            t = t.to_local()
        elem = getattr(t, "elem", None)
        if isinstance(elem, torch.Tensor):
            t = elem
        try:
            self._seen[key] = weakref.ref(t.untyped_storage(), lambda _r: self._seen.pop(key, None))
        except (RuntimeError, NotImplementedError, TypeError):
            self._seen[key] = None

    @contextlib.contextmanager
    def recording(self) -> Iterator[SavedBytes]:
        """Count the saves of the forward passes run inside the context."""
        handles = []
        for i, layer in self.layers.items():
            handles.append(layer.register_forward_pre_hook(lambda *_a, _i=i: self._enter(_i)))
            handles.append(layer.register_forward_hook(lambda *_a: self._leave()))
        _RECORDING.append(self)
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
                yield self
        finally:
            _RECORDING.remove(self)
            for h in handles:
                h.remove()

    def _enter(self, index: int) -> None:
        self._current.append(index)

    def _leave(self) -> None:
        self._current.pop()
