"""Process groups for multi-process training: start-up, small collectives, torchrun.

``agentgym train --nproc N`` re-launches itself through torchrun (``torch.distributed.run``)
with ``N`` processes per node; each process then finds its rank in the usual torchrun
variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``).
Multi-node runs take ``--nnodes``, ``--node-rank``, ``--master-addr`` and
``--master-port`` (defaults from ``NNODES``, ``NODE_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``), exactly what torchrun itself would be given.

The backend is ``nccl`` when CUDA is available and ``gloo`` otherwise (CPU runs, CI).
A collective that waits longer than ``distributed.timeout_s`` (default 1800 s) fails; it
is a backstop: the launcher's fault detector finds a stalled rank in seconds
(docs/reliability.md).

Only small Python objects travel through :func:`all_gather_objects` (episodes, metric
sums); tensors of the model move through the strategy's own collectives (DeepSpeed,
FSDP2). The time each rank spends in the collectives of this module is counted
(:data:`~agentgym.health.COLLECTIVES`) and reported in its heartbeat: the rank
the others wait for is the one that waits least.
"""

from __future__ import annotations

import dataclasses
import datetime
import faulthandler
import gc
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from agentgym import ConfigError
from agentgym.health import COLLECTIVES

if TYPE_CHECKING:  # torch is imported where it is used: the launcher needs none of it
    import torch

    from agentgym.trainers.config import DistributedConfig
    from agentgym.trainers.parallel import Layout

T = TypeVar("T")

#: set in the children of a launch so they do not launch again
LAUNCHED_ENV = "AGENTGYM_TORCHRUN"
#: the collective timeout when none is configured (minutes, not torch's 30)
DEFAULT_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job.

    Attributes:
        rank: global rank (0 on a single process).
        world_size: number of processes.
        local_rank: rank on this node (picks the GPU on CUDA machines).
        backend: ``gloo``, ``nccl`` or ``none`` (single process, no process group).
        layout: the device mesh's sizes (``distributed: {dp_shard, tp, ep, pp}``), or
            None for plain sharded data parallelism over every rank.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str = "none"
    layout: Layout | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend != "none"

    @property
    def device(self) -> torch.device:
        import torch

        if self.backend == "nccl":
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")


SINGLE = DistInfo()


def under_torchrun() -> bool:
    """Whether this process was started by torchrun (or another launcher setting RANK)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def start_distributed(config: DistributedConfig, *, lora: bool) -> DistInfo:
    """Join the process group a sharded strategy needs; refuse set-ups that cannot work.

    ``distributed.strategy: none`` is one process (:data:`SINGLE`); under torchrun with
    more than one process that is a configuration error, as is a sharded strategy
    without LoRA (full fine-tuning runs on one process), or a device mesh
    (``dp_shard * tp * ep * pp``) whose size is not the number of processes.
    """
    if config.strategy == "none":
        if under_torchrun() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ConfigError(
                "this run has several processes but distributed.strategy is none: set "
                "distributed.strategy=deepspeed or distributed.strategy=fsdp2."
            )
        return SINGLE
    if not lora:
        raise ConfigError(
            f"distributed.strategy {config.strategy} trains LoRA adapters only here: set "
            "lora.enabled=true (full fine-tuning runs on one process)."
        )
    from agentgym.trainers.parallel import Layout

    layout = Layout.from_config(config)
    if not layout.is_default and under_torchrun():  # before joining: a clear error, no hang
        layout.check_world(int(os.environ["WORLD_SIZE"]))
    info = init_distributed(timeout_s=config.timeout_s, backend=config.backend)
    if layout.is_default:
        return info
    layout.check_world(info.world_size)
    return dataclasses.replace(info, layout=layout)


def init_distributed(timeout_s: float = DEFAULT_TIMEOUT_S, backend: str = "auto") -> DistInfo:
    """Join the process group described by the torchrun variables (idempotent).

    Args:
        timeout_s: collective timeout; a rank that waits longer fails with an error
            instead of hanging forever.
        backend: ``auto`` (nccl with CUDA, else gloo), ``gloo`` or ``nccl``.
    """
    if not under_torchrun():
        raise ConfigError(
            "a sharded strategy needs a process group: start the run with "
            "`agentgym train CONFIG --nproc N` (or under torchrun)."
        )
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ConfigError(f"distributed.backend must be auto, gloo or nccl, got {backend!r}.")
    if backend == "nccl":
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    if not faulthandler.is_enabled():  # a rank that crashes shows its threads' stacks
        faulthandler.enable(all_threads=True)
    return DistInfo(rank=rank, world_size=world, local_rank=local, backend=backend)


def all_gather_objects(obj: T, info: DistInfo) -> list[T]:
    """Every rank's ``obj``, in rank order (just ``[obj]`` on a single process)."""
    if not info.distributed:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * info.world_size
    with COLLECTIVES.track("all_gather_object"):
        dist.all_gather_object(out, obj)
    return out


def all_reduce_sum(values: Sequence[float], info: DistInfo) -> list[float]:
    """Element-wise sum over ranks of a list of floats (float64 on the wire).

    The tensor is made on the backend's device (:attr:`DistInfo.device`: the rank's GPU
    under nccl, which reduces CUDA tensors only); the result comes back as floats.
    """
    if not info.distributed:
        return list(values)
    import torch
    import torch.distributed as dist

    t = torch.tensor(list(values), dtype=torch.float64, device=info.device)
    with COLLECTIVES.track("all_reduce"):
        dist.all_reduce(t)
    return t.tolist()


def barrier(info: DistInfo) -> None:
    if info.distributed:
        import torch.distributed as dist

        with COLLECTIVES.track("barrier"):
            dist.barrier()


def shutdown(info: DistInfo, *, wait_for_all: bool = True) -> None:
    """Leave the process group (no-op on a single process).

    With ``wait_for_all`` every rank first meets the others at a barrier, so no rank
    tears its connections down while a peer still talks to it (seen on gloo as an abort
    at exit); after an error the barrier is skipped, since a peer may never arrive.

    ``destroy_process_group`` only unregisters the groups: each lives, with its gloo
    threads, until the last Python reference to it goes. The caller drops its own (the
    trainer) first; a garbage collection here then frees the groups held in reference
    cycles, so their threads are joined now. Left to the interpreter's exit, a gloo thread
    that drops a tensor as Python shuts down aborts the process ("terminate called
    without an active exception") after a run that succeeded.
    """
    if info.distributed:
        import torch.distributed as dist

        if dist.is_initialized():
            if wait_for_all:
                dist.barrier()
            dist.destroy_process_group()
        gc.collect()


def torchrun_command(
    argv: Sequence[str],
    *,
    nproc: int,
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
) -> list[str]:
    """The command that runs ``python -m agentgym *argv`` under torchrun.

    A single node uses torchrun's ``--standalone`` rendezvous (a free local port, so
    several runs on one machine do not collide); several nodes use the static
    ``MASTER_ADDR:MASTER_PORT`` rendezvous every node is given.
    """
    if nproc < 1:
        raise ConfigError(f"--nproc must be >= 1, got {nproc}.")
    if nnodes < 1 or not 0 <= node_rank < nnodes:
        raise ConfigError(f"--node-rank must be in [0, {nnodes}), got {node_rank}.")
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}"]
    if nnodes == 1:
        cmd.append("--standalone")
    else:
        if not master_addr:
            raise ConfigError(
                "a multi-node run needs the address of node 0: pass --master-addr HOST "
                "(or set MASTER_ADDR) on every node."
            )
        cmd += [
            f"--nnodes={nnodes}",
            f"--node-rank={node_rank}",
            f"--master-addr={master_addr}",
            f"--master-port={master_port or 29500}",
        ]
    cmd += ["-m", "agentgym", *argv]
    return cmd
