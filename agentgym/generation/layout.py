"""Where an engine runs among the trainer's ranks: replicas, stages, experts (no torch).

Under ``agentgym train --nproc N`` the rollout engine lives in the trainer's own processes
(all-sync: rollout and training take turns on the same devices). An engine spans
``tp * pp`` ranks (its tensor- and pipeline-parallel sizes); the ``N`` ranks hold
``N / (tp * pp)`` independent *replicas* of it. Ranks are numbered as vLLM numbers the
workers of ``distributed_executor_backend="external_launcher"``: tensor-parallel rank
fastest, then the pipeline stage, then the replica. So on GPUs a replica's tensor-parallel
workers share a node and its stages span nodes, as the trainer's own mesh does.

:class:`EngineLayout` answers every question the trainer, the weight sync and the planner
ask of that placement; :class:`Replicas` is what a rollout needs of it (which replica this
rank belongs to, how many there are, whether this rank drives its replica). One rank of
each replica -- tensor rank 0 of stage 0 -- *drives* it: it plays the replica's episodes
and hands each engine step to the replica's other ranks (:mod:`.lockstep`).

:func:`stage_ranges` is the one pipeline split of the project: the trainer cuts its
stages with it, the planner sizes them with it and the vLLM engine is told the same split
(``VLLM_PP_LAYER_PARTITION``), so engine stage ``s`` holds exactly the layers trainer
stage ``s`` trains and the adapter of a stage never leaves it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from agentgym import ConfigError

T = TypeVar("T")


def stage_ranges(num_layers: int, pp: int, *, key: str = "distributed.pp") -> list[range]:
    """The decoder layers of each pipeline stage: contiguous, earlier stages take the
    remainder (61 layers over 6 stages: 11, 10, 10, 10, 10, 10).

    ``key`` is the setting an error names.
    """
    if pp < 1:
        raise ConfigError(f"pipeline size must be >= 1, got {pp}; fix {key}.")
    if pp > num_layers:
        raise ConfigError(
            f"pipeline size {pp} exceeds the {num_layers} decoder layers; lower {key}."
        )
    base, extra = divmod(num_layers, pp)
    out, start = [], 0
    for s in range(pp):
        n = base + (s < extra)
        out.append(range(start, start + n))
        start += n
    return out


@dataclass(frozen=True)
class Replicas:
    """Which engine replica this rank belongs to.

    Attributes:
        index: this rank's replica.
        count: replicas in the job.
        leads: this rank drives its replica (plays its episodes); the others serve the
            engine steps it hands them.
    """

    index: int = 0
    count: int = 1
    leads: bool = True

    def deal(self, items: Sequence[T]) -> list[T]:
        """This replica's share of ``items`` (every ``count``-th from ``index``); nothing
        on a rank that does not drive its replica."""
        return list(items[self.index :: self.count]) if self.leads else []

    def owns(self, i: int) -> bool:
        """Item ``i`` of a dealt sequence is this rank's to play."""
        return self.leads and i % self.count == self.index


#: one process: one replica, driven here
SINGLE_REPLICA = Replicas()


@dataclass(frozen=True)
class Worker:
    """One engine worker: its replica, pipeline stage and tensor-parallel rank."""

    replica: int
    stage: int
    tp: int


@dataclass(frozen=True)
class EngineLayout:
    """An engine of ``tp x pp`` workers, replicated over ``world_size`` ranks.

    Attributes:
        world_size: the trainer's processes.
        tp: the engine's tensor-parallel size.
        pp: the engine's pipeline-parallel size.
        expert_parallel: routed experts split over the ``tp`` workers of a stage (vLLM's
            ``enable_expert_parallel``) rather than each worker slicing every expert.
    """

    world_size: int = 1
    tp: int = 1
    pp: int = 1
    expert_parallel: bool = False

    def __post_init__(self) -> None:
        if self.tp < 1 or self.pp < 1:
            raise ConfigError(
                f"rollout.engine_options: tensor_parallel_size {self.tp} and "
                f"pipeline_parallel_size {self.pp} must be >= 1."
            )
        if self.world_size % self.size:
            raise ConfigError(
                f"the engine spans tensor_parallel_size x pipeline_parallel_size = "
                f"{self.tp} x {self.pp} = {self.size} ranks, which does not divide the "
                f"{self.world_size} processes of this run: make the processes a multiple of "
                f"{self.size} (replicas of the engine), or change rollout.engine_options."
            )

    @property
    def size(self) -> int:
        """Ranks one replica spans."""
        return self.tp * self.pp

    @property
    def replicas(self) -> int:
        return self.world_size // self.size

    def worker(self, rank: int) -> Worker:
        """The engine worker that lives on ``rank``."""
        replica, inner = divmod(rank, self.size)
        stage, tp = divmod(inner, self.tp)
        return Worker(replica, stage, tp)

    def rank_of(self, w: Worker) -> int:
        return (w.replica * self.pp + w.stage) * self.tp + w.tp

    def leader(self, replica: int) -> int:
        """The rank that drives ``replica`` (tensor rank 0 of its first stage)."""
        return replica * self.size

    def replica_ranks(self, replica: int) -> list[int]:
        return list(range(replica * self.size, (replica + 1) * self.size))

    def replicas_of(self, rank: int) -> Replicas:
        w = self.worker(rank)
        return Replicas(index=w.replica, count=self.replicas, leads=w.stage == 0 and w.tp == 0)

    def layers_of(self, rank: int, num_layers: int) -> range:
        """The decoder layers the worker on ``rank`` holds."""
        return stage_ranges(
            num_layers, self.pp, key="rollout.engine_options.pipeline_parallel_size"
        )[self.worker(rank).stage]

    def experts_of(self, rank: int, num_experts: int) -> range:
        """The routed experts whose adapter rows the worker on ``rank`` serves: a
        contiguous ``1 / tp`` of them under expert parallelism, all of them otherwise
        (each worker then slices every expert by itself)."""
        if not self.expert_parallel or self.tp == 1:
            return range(num_experts)
        if num_experts % self.tp:
            raise ConfigError(
                f"{num_experts} routed experts do not split evenly over the engine's "
                f"{self.tp} tensor-parallel workers (enable_expert_parallel)."
            )
        per = num_experts // self.tp
        t = self.worker(rank).tp
        return range(t * per, (t + 1) * per)

    def partition(self, num_layers: int) -> list[int]:
        """Decoder layers per stage, as vLLM's ``VLLM_PP_LAYER_PARTITION`` wants them."""
        return [len(r) for r in stage_ranges(num_layers, self.pp)]

    def describe(self, num_layers: int | None = None, num_experts: int | None = None) -> list[str]:
        """Lines for ``--print-config``: replicas, stages and expert placement."""
        driven = (
            "driven by rank 0"
            if self.replicas == 1
            else f"replica r driven by rank r x {self.size}"
        )
        lines = [
            f"engine: {self.replicas} replica(s) of tp {self.tp} x pp {self.pp} over "
            f"{self.world_size} ranks, {driven}"
        ]
        if num_layers is not None and self.pp > 1:
            split = ", ".join(
                f"stage {s}: layers {r.start}-{r.stop - 1}"
                for s, r in enumerate(stage_ranges(num_layers, self.pp))
            )
            lines.append(f"engine stages: {split}")
        if num_experts and self.expert_parallel and self.tp > 1:
            per = num_experts // self.tp
            lines.append(
                f"engine experts: worker t of each stage serves experts t x {per} .. "
                f"t x {per} + {per - 1} of {num_experts}"
            )
        return lines
