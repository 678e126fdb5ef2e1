"""The device mesh of a layout, and the sub-meshes each kind of parallelism works on.

One 4-D ``DeviceMesh`` over all ranks, dimensions ``(pp, dp_shard, ep, tp)``
(:data:`~agentgym.trainers.parallel.layout.MESH_DIMS`); the rest are views of it:

* ``tp``: tensor-parallel DTensors;
* ``dp`` (``dp_shard x ep`` flattened): FSDP2 shards the dense weights over it, and the
  micro-batches are dealt over it;
* ``dp_shard``: FSDP2 shards the expert weights over it;
* ``expert`` (``ep x tp`` flattened): the all-to-all group of the routed experts;
* ``pp``: the pipeline's point-to-point group (one rank per stage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from agentgym.trainers.parallel.layout import MESH_DIMS, Coords, Layout


@dataclass
class ParallelMesh:
    """A layout's mesh on this rank (see the module docstring).

    Attributes:
        layout: the sizes.
        rank: this process's global rank; coords: its place on each dimension.
        mesh: the 4-D mesh; tp / dp / dp_shard / expert / pp: 1-D views of it.
        device: where this rank computes.
    """

    layout: Layout
    rank: int
    coords: Coords
    mesh: Any
    tp: Any
    dp: Any
    dp_shard: Any
    expert: Any
    pp: Any
    device: torch.device

    @property
    def pp_group(self) -> Any:
        return self.pp.get_group()

    @property
    def expert_group(self) -> Any:
        return self.expert.get_group()

    def pp_peer(self, stage: int) -> int:
        """The global rank of ``stage`` in this rank's pipeline."""
        return int(self.pp.mesh[stage].item())

    @property
    def is_first_stage(self) -> bool:
        return self.coords.pp == 0

    @property
    def is_last_stage(self) -> bool:
        return self.coords.pp == self.layout.pp - 1


def build_mesh(layout: Layout, rank: int, device: torch.device) -> ParallelMesh:
    """The mesh of ``layout`` (every rank must call it, in the same order)."""
    from torch.distributed.device_mesh import init_device_mesh

    sizes = tuple(getattr(layout, d) for d in MESH_DIMS)
    mesh = init_device_mesh(device.type, sizes, mesh_dim_names=MESH_DIMS)
    return ParallelMesh(
        layout=layout,
        rank=rank,
        coords=layout.coords(rank),
        mesh=mesh,
        tp=mesh["tp"],
        dp=mesh["dp_shard", "ep"]._flatten("dp"),
        dp_shard=mesh["dp_shard"],
        expert=mesh["ep", "tp"]._flatten("expert"),
        pp=mesh["pp"],
        device=device,
    )
