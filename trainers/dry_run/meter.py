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

import weakref
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


def grad_bytes(model: nn.Module) -> int:
    """Bytes of the gradients this rank holds."""
    return sum(tensor_bytes(p.grad) for p in model.parameters() if p.grad is not None)


class LiveBytes(TorchDispatchMode):
    """Storages allocated by the ops run under it, until they are freed: ``live`` and
    ``peak`` bytes (module docstring). Meta tensors hold nothing and are not counted.

    DTensors are left to their own dispatch (their local ops come back through the mode),
    so a sharded tensor counts as its local shard.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
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
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
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

    def _free(self, key: int) -> None:
        if self._refs.pop(key, None) is not None:
            self.live -= self._sizes.pop(key)

    def reset_peak(self) -> None:
        self.peak = self.live
