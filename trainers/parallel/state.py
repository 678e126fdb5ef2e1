"""Whole tensors from a parallel model, and back: checkpoints, generation and resume.

Every parameter of the training model lives on some ranks only, in some shape:

* on the pipeline stage that holds its layer (the embedding on the first stage, the
  final norm and head on the last);
* as a DTensor when FSDP2 and/or tensor parallelism split it (``full_tensor`` gathers);
* as a share of the experts when expert parallelism split it (:mod:`.experts`).

:class:`ParamMap` knows which, by the parameter's name (the names are those of the
unsplit peft model), and turns a list of names into whole tensors on every rank
(:meth:`ParamMap.gather`: collectives in one fixed order, so every rank must ask for the
same names) or whole tensors into this rank's shares (:meth:`ParamMap.load`).
:meth:`ParamMap.stream` brings whole tensors to one rank only, one at a time (the adapter
for a checkpoint, the engine or a digest): the others take part in the collectives and
hold at most one gathered tensor beyond their own shares.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from agentgym.generation import stage_ranges
from agentgym.trainers.parallel.experts import (
    ExpertGroup,
    ExpertShard,
    gather_expert_tensor,
    gather_expert_tensor_to,
    shard_expert_tensor,
)
from agentgym.trainers.parallel.mesh import ParallelMesh
from agentgym.trainers.parallel.quant import is_quantized

_LAYER = re.compile(r"\.layers\.(\d+)\.")


def _is_dtensor(t: Any) -> bool:
    return hasattr(t, "device_mesh") and hasattr(t, "placements")


class ParamMap:
    """Where each parameter of a parallel model is (see the module docstring).

    Args:
        model: the training model (split in place).
        shapes: name -> (shape, dtype) of every parameter of the unsplit model.
        pmesh: the mesh.
        num_layers: decoder layers of the model (for the pipeline stages).
        experts: name -> (kind, shard) of the parameters holding a share of the experts.
        expert_group: the expert group (when ``experts`` is not empty).
    """

    def __init__(
        self,
        model: nn.Module,
        shapes: Mapping[str, tuple[torch.Size, torch.dtype]],
        pmesh: ParallelMesh,
        num_layers: int,
        experts: Mapping[str, tuple[str, ExpertShard]],
        expert_group: ExpertGroup | None,
    ) -> None:
        self.model = model
        self.shapes = dict(shapes)
        self.pmesh = pmesh
        self.experts = dict(experts)
        self.expert_group = expert_group
        self._stage_of_layer = {
            i: s for s, r in enumerate(stage_ranges(num_layers, pmesh.layout.pp)) for i in r
        }

    def stage_of(self, name: str) -> int:
        """The pipeline stage holding ``name``."""
        m = _LAYER.search(name)
        if m is not None:
            return self._stage_of_layer[int(m.group(1))]
        return 0 if "embed_tokens" in name else self.pmesh.layout.pp - 1

    def local(self) -> dict[str, nn.Parameter]:
        """This rank's parameters by name."""
        return dict(self.model.named_parameters())

    def _stage_full(self, name: str, param: torch.Tensor) -> torch.Tensor:
        """The whole tensor of a parameter of this rank's stage (collectives inside the
        stage: FSDP2 / tensor-parallel gathers, then the expert group's)."""
        t = param.detach()
        if is_quantized(t):  # fp8 experts kept at loading: whole tensors in the base dtype
            t = t.dequantize()
        t = t.full_tensor() if _is_dtensor(t) else t.clone()
        if name in self.experts:
            kind, shard = self.experts[name]
            assert self.expert_group is not None
            t = gather_expert_tensor(t, kind, shard, self.expert_group)
        return t

    def _stage_full_to(self, name: str, param: torch.Tensor, src: int) -> torch.Tensor | None:
        """The whole tensor of a parameter of this rank's stage on rank ``src`` of the
        stage alone: FSDP2 / tensor-parallel gathers (every rank of their mesh holds the
        whole tensor for a moment), then the experts' shares gathered to ``src`` only
        (by the expert group ``src`` belongs to; the others' groups hold copies)."""
        t = param.detach()
        t = t.full_tensor() if _is_dtensor(t) else t
        me = self.pmesh.rank
        if name in self.experts:
            assert self.expert_group is not None
            layout = self.pmesh.layout
            if layout.coords(src).dp_shard != self.pmesh.coords.dp_shard:
                return None  # not src's expert group
            kind, shard = self.experts[name]
            return gather_expert_tensor_to(t, kind, shard, self.expert_group, dst=src)
        return t if me == src else None

    def gather(self, names: Iterable[str]) -> dict[str, torch.Tensor]:
        """Whole tensors of ``names`` on every rank (every rank must call it with the
        same names)."""
        names = sorted(names)
        mine = self.local()
        out: dict[str, torch.Tensor] = {}
        here = self.pmesh.coords.pp
        for name in names:
            if self.stage_of(name) == here:
                out[name] = self._stage_full(name, mine[name])
        if self.pmesh.layout.pp > 1:
            for name in names:
                stage = self.stage_of(name)
                if stage == here:
                    t = out[name].contiguous()
                else:
                    shape, dtype = self.shapes[name]
                    t = torch.empty(shape, dtype=dtype, device=self.pmesh.device)
                dist.broadcast(t, src=self.pmesh.pp_peer(stage), group=self.pmesh.pp_group)
                out[name] = t
        return out

    def _rank_at(self, stage: int, like: int) -> int:
        """The global rank of ``stage`` in the pipeline of rank ``like``."""
        layout = self.pmesh.layout
        c = layout.coords(like)
        return ((stage * layout.dp_shard + c.dp_shard) * layout.ep + c.ep) * layout.tp + c.tp

    def stream(self, names: Iterable[str], dst: int) -> Iterator[tuple[str, torch.Tensor]]:
        """Whole tensors of ``names``, in the given order, on rank ``dst`` alone: each is
        gathered inside the stage that holds it (a transient whole tensor on that stage's
        ranks) and, when that stage is not ``dst``'s, sent to ``dst`` by the rank of
        ``dst``'s pipeline. Every rank must run the generator to its end with the same
        names; on ranks other than ``dst`` it yields nothing."""
        mine = self.local()
        here = self.pmesh.coords.pp
        me = self.pmesh.rank
        dst_stage = self.pmesh.layout.coords(dst).pp
        for name in names:
            stage = self.stage_of(name)
            src = self._rank_at(stage, dst)  # gathers it in its stage
            t = self._stage_full_to(name, mine[name], src) if stage == here else None
            if stage != dst_stage:
                if me == src:
                    dist.send(t.contiguous(), dst=dst)
                elif me == dst:
                    shape, dtype = self.shapes[name]
                    t = torch.empty(shape, dtype=dtype, device=self.pmesh.device)
                    dist.recv(t, src=src)
            if me == dst:
                yield name, t
            del t

    def load(self, full: Mapping[str, torch.Tensor]) -> None:
        """Copy whole tensors into this rank's shares of them (the names this rank's
        stage holds; others are ignored)."""
        from torch.distributed.tensor import distribute_tensor

        mine = self.local()
        here = self.pmesh.coords.pp
        with torch.no_grad():
            for name in sorted(full):
                if self.stage_of(name) != here:
                    continue
                param = mine[name]
                value = full[name]
                if name in self.experts:
                    kind, shard = self.experts[name]
                    value = shard_expert_tensor(value, kind, shard)
                value = value.to(dtype=param.dtype, device=self.pmesh.device)
                if _is_dtensor(param):
                    part = distribute_tensor(
                        value, param.device_mesh, param.placements, src_data_rank=None
                    )
                    param.to_local().copy_(part.to_local())
                else:
                    param.copy_(value)
