"""The step lockstep of an engine replica that spans several ranks.

An engine whose workers live on several of the trainer's ranks (tensor or pipeline
parallel, vLLM's ``external_launcher``) computes a step only when every one of its ranks
makes the same engine calls in the same order: the same requests added, the same ones
aborted, then one ``step``. A whole-batch ``generate`` on every rank would do that, but
it cannot serve multi-turn episodes, whose next turn arrives while other requests still
decode. So one rank drives the replica (:class:`~.layout.Replicas`): it runs the
episodes, and before each engine step it posts what changed (:class:`Step`) to the
replica's other ranks, which apply it and step too (:meth:`Lockstep.follow`). When its
rollout ends the driver posts :class:`Release` and the others return to training.

The posts travel over a gloo group of the replica's ranks (small Python objects: request
ids, token ids, sampling settings). Every rank builds every replica's group, in the same
order, because creating a process group is a collective of the whole job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch.distributed as dist

from agentgym.generation.layout import EngineLayout

T = TypeVar("T")


@dataclass(frozen=True)
class Added:
    """A request entering the engine: its id, prompt token ids, sampling settings (plain
    data: ``SamplingParams`` keyword arguments) and the LoRA id it generates with."""

    request_id: str
    prompt: list[int]
    sampling: dict[str, Any]
    lora_id: int | None
    arrival: float


@dataclass(frozen=True)
class Step:
    """One engine step: add these requests, abort those, then step."""

    added: list[Added] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Release:
    """The driver's rollout is over (``error``: it failed, with this message)."""

    error: str | None = None


class ReplicaFailed(RuntimeError):
    """The rank driving this replica failed during its rollout."""


class Lockstep:
    """The posts between the rank that drives a replica and its other ranks.

    Args:
        layout: the engine's placement over the job.
        rank: this process's global rank.
    """

    def __init__(self, layout: EngineLayout, rank: int) -> None:
        self.layout = layout
        self.rank = rank
        replicas = layout.replicas_of(rank)
        self.leads = replicas.leads
        self.leader = layout.leader(replicas.index)
        groups = [
            dist.new_group(layout.replica_ranks(r), backend="gloo") for r in range(layout.replicas)
        ]
        self.group = groups[replicas.index]
        self.posts = 0

    def post(self, message: Step | Release) -> None:
        """Driver: hand ``message`` to the replica's other ranks."""
        dist.broadcast_object_list([message], src=self.leader, group=self.group)
        self.posts += 1

    def take(self) -> Step | Release:
        """Another rank: the driver's next message."""
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=self.leader, group=self.group)
        return box[0]

    def follow(self, apply: Callable[[Step], None]) -> None:
        """Another rank: apply each step the driver posts until it releases the replica.

        Raises:
            ReplicaFailed: the driver's rollout failed (every rank of the replica then
                fails the same way instead of waiting for a collective that never comes).
        """
        while True:
            message = self.take()
            if isinstance(message, Release):
                if message.error is not None:
                    raise ReplicaFailed(
                        f"rank {self.leader}, which drives this engine replica, failed: "
                        f"{message.error}"
                    )
                return
            apply(message)

    def drive(self, work: Callable[[], T]) -> T:
        """Driver: run ``work`` (a rollout that posts steps), then release the others,
        also when ``work`` fails."""
        try:
            result = work()
        except BaseException as e:
            self.post(Release(error=f"{type(e).__name__}: {e}"))
            raise
        self.post(Release())
        return result
