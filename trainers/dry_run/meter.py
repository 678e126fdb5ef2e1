"""Bytes a rank holds: its shares, its optimizer state, and what passes through its host.

The same functions measure a dry run (fake tensors: shapes without memory) and a real
multi-process run (``tests/helpers/parallel_bytes.py``), so that the two can be compared
number for number:

* :func:`share_bytes`: the frozen base and the adapter this rank holds (a DTensor by its
  local shard, a quantized tensor with its scales), and the bytes of the optimizer's
  state (:func:`optimizer_bytes`);
* :class:`LiveBytes`: a dispatch mode that adds up the storages the code it watches
  allocates and frees (a storage counts once, its views nothing; a freed one leaves), with
  the peak: what the dry run's set-up allocates while a rank reads its share.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from agentgym.trainers.loading import local_tensor, tensor_bytes


def share_bytes(model: nn.Module) -> dict[str, int]:
    """``{"base", "adapter"}``: bytes of this rank's frozen parameters and buffers, and of
    its adapter (``lora_`` parameters), each storage once."""
    seen: set[int] = set()
    out = {"base": 0, "adapter": 0}
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if id(t) in seen:
            continue
        seen.add(id(t))
        out["adapter" if "lora_" in name else "base"] += tensor_bytes(t)
    return out


def optimizer_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the optimizer's state on this rank (AdamW: step, two moments)."""
    total = 0
    for state in optimizer.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                total += tensor_bytes(v)
    return total


def storage_keys(tensors: Any) -> set[int]:
    """The storages ``tensors`` hold on this rank (a DTensor's local shard, a torchao
    tensor's parts), as :class:`LiveBytes` keys them."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    keys: set[int] = set()
    stack = [local_tensor(t) for t in tensors if isinstance(t, torch.Tensor)]
    while stack:
        t = stack.pop()
        if is_traceable_wrapper_subclass(t):
            stack += [getattr(t, n) for n in t.__tensor_flatten__()[0]]
            continue
        try:
            keys.add(t.untyped_storage()._cdata)
        except (RuntimeError, NotImplementedError, TypeError):
            continue
    return keys


def grad_bytes(model: nn.Module) -> int:
    """Bytes of the gradients this rank holds."""
    return sum(tensor_bytes(p.grad) for p in model.parameters() if p.grad is not None)


#: inside DTensor's sharding propagation (its global-shape tensors are metadata)
_PROPAGATING: list[bool] = []


@contextlib.contextmanager
def uncounted_propagation() -> Iterator[None]:
    """DTensor works out an op's output shape by running it on fake tensors of the global
    shapes, in the fake mode already active when there is one (a dry run's): those are
    metadata, never memory on a rank, and :class:`LiveBytes` leaves them out inside this
    block (PyTorch's propagation is wrapped for its duration)."""
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    original = ShardingPropagator._propagate_tensor_meta_non_cached

    def propagate(self: Any, *args: Any, **kwargs: Any) -> Any:
        _PROPAGATING.append(True)
        try:
            return original(self, *args, **kwargs)
        finally:
            _PROPAGATING.pop()

    ShardingPropagator._propagate_tensor_meta_non_cached = propagate
    try:
        yield
    finally:
        ShardingPropagator._propagate_tensor_meta_non_cached = original


class LiveBytes(TorchDispatchMode):
    """Storages allocated by the ops run under it, until they are freed: ``live`` and
    ``peak`` bytes (module docstring). Meta tensors hold nothing and are not counted.

    DTensors are left to their own dispatch (their local ops come back through the mode),
    so a sharded tensor counts as its local shard.
    """

    def __init__(self, fake: Any = None, *, record: bool = False) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.fake = fake
        #: (storage, bytes added or freed), in order, when recording
        self.events: list[tuple[int, int]] | None = [] if record else None
        self._refs: dict[int, Any] = {}
        self._sizes: dict[int, int] = {}
        self._resize: Any = None

    def __enter__(self) -> LiveBytes:
        # FSDP2 frees and re-allocates its gathered parameters by resizing their storage,
        # which no dispatch mode sees (PyTorch's MemTracker patches it the same way)
        original = self._resize = torch.UntypedStorage.resize_

        def resize_(st: torch.UntypedStorage, size: int) -> Any:
            out = original(st, size)
            key = st._cdata
            if key in self._sizes:
                self._add(key, st.nbytes() - self._sizes[key])
            return out

        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign]
        return super().__enter__()

    def __exit__(self, *exc: Any) -> Any:
        torch.UntypedStorage.resize_ = self._resize  # type: ignore[method-assign]
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        from torch.distributed.tensor import DTensor

        if any(t is DTensor or issubclass(t, DTensor) for t in types):
            return NotImplemented
        from torch._guards import active_fake_mode
        from torch.utils._python_dispatch import is_traceable_wrapper_subclass

        out = func(*args, **(kwargs or {}))
        mode = active_fake_mode()
        if _PROPAGATING or (mode is not None and mode is not self.fake):
            return out  # DTensor's shape propagation: metadata, not memory
        for t in tree_flatten(out)[0]:
            if (
                isinstance(t, torch.Tensor)
                and t.device.type != "meta"
                and not is_traceable_wrapper_subclass(t)  # a torchao tensor: its parts count
            ):
                self._note(t)
        return out

    def _note(self, t: torch.Tensor) -> None:
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            return  # a wrapper subclass: its inner tensors come through on their own
        key = st._cdata
        if key in self._refs:
            return
        self._sizes[key] = 0
        self._add(key, st.nbytes())
        self._refs[key] = weakref.ref(st, lambda _r, k=key: self._free(k))

    def known(self, tensors: Any) -> None:
        """Storages that exist already (counted elsewhere): an op that writes into them in
        place, or views them, allocates nothing."""
        for t in tensors:
            if isinstance(t, torch.Tensor):
                local = local_tensor(t)
                try:
                    key = local.untyped_storage()._cdata
                except (RuntimeError, NotImplementedError, TypeError):
                    continue
                self._sizes.setdefault(key, 0)
                self._refs.setdefault(key, None)

    def _add(self, key: int, n: int) -> None:
        self._sizes[key] += n
        self.live += n
        self.peak = max(self.peak, self.live)
        if self.events is not None:
            self.events.append((key, n))

    def _free(self, key: int) -> None:
        if self._refs.pop(key, None) is not None:
            n = self._sizes.pop(key)
            self.live -= n
            if self.events is not None:
                self.events.append((key, -n))

    def peak_without(self, keys: set[int]) -> int:
        """The peak of what was live, leaving out the storages ``keys`` (recorded runs):
        the host's share of a set-up whose device tensors are ``keys``."""
        live = peak = 0
        for key, n in self.events or ():
            if key not in keys:
                live += n
                peak = max(peak, live)
        return peak

    def reset_peak(self) -> None:
        self.peak = self.live
