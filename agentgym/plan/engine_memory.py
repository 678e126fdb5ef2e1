"""The colocated vLLM engine's memory against ``gpu_memory_utilization``: the KV cache's
margin, the sequences it holds, the host memory sleep level 1 pins, and the warnings a
plan gives when the engine would preempt or not start (docs/plan.md, the engine's cost).

Pure functions of a plan's rollout line items (:mod:`.plans` computes them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentgym.plan.memory import LineItem
from agentgym.plan.specs import Hardware, RolloutSpec


@dataclass(frozen=True)
class EngineMemory:
    """The colocated vLLM engine's memory against ``gpu_memory_utilization``, and its
    host memory per node (GiB).

    vLLM gives the KV cache what ``gpu_memory_utilization x`` the GPU leaves after its
    weights and its profiled working set, and a cache short of ``max_num_seqs x
    max_model_len`` is not an error: the scheduler admits fewer sequences and preempts
    (recomputes) the rest, silently.

    Attributes:
        budget: ``gpu_memory_utilization x`` the GPU.
        weights / workspace: the engine's weights (adapter included) and working set.
        kv_need: the cache ``max_num_seqs`` sequences of ``max_model_len`` tokens need.
        kv_room: what the budget leaves the cache; margin: ``kv_room - kv_need``.
        seqs_fit: sequences of ``max_model_len`` the cache holds; max_num_seqs: asked.
        pinned_per_node: host memory a node pins for the engines' weights while they
            sleep (level 1 moves them to pinned host memory; 0 at levels 0 and 2).
        node_gpus: the GPUs of a node.
    """

    budget: float
    weights: float
    workspace: float
    kv_need: float
    kv_room: float
    seqs_fit: int
    max_num_seqs: int
    pinned_per_node: float
    node_gpus: int

    @property
    def margin(self) -> float:
        return self.kv_room - self.kv_need

    def lines(self) -> list[str]:
        """What ``agentgym plan`` prints of it."""
        out = [
            f"rollout KV cache: {self.kv_need:.1f} GiB for {self.max_num_seqs} sequences; "
            f"gpu_memory_utilization leaves it {self.kv_room:.1f} GiB ({self.budget:.1f} "
            f"- weights {self.weights:.1f} - workspace {self.workspace:.1f}): margin "
            f"{self.margin:+.1f} GiB, {self.seqs_fit} sequences of max_model_len fit"
        ]
        if self.pinned_per_node:
            out.append(
                f"host memory per node: {self.pinned_per_node:.1f} GiB pinned while the engine "
                f"sleeps (level 1: {self.node_gpus} GPUs x {self.weights:.1f} GiB of weights)"
            )
        return out


def engine_memory(
    items: Sequence[LineItem], rollout: RolloutSpec | None, hardware: Hardware
) -> EngineMemory | None:
    """The engine's :class:`EngineMemory` from a plan's rollout items (None without a
    colocated vLLM engine)."""
    if rollout is None or rollout.engine != "vllm":
        return None
    gib = {i.name: i.gib for i in items}
    weights, workspace = gib.get("rollout weights", 0.0), gib.get("rollout workspace", 0.0)
    kv_need = gib.get("rollout KV cache", 0.0)
    budget = rollout.gpu_memory_utilization * hardware.gpu_mem_gib
    room = budget - weights - workspace
    per_seq = kv_need / rollout.max_num_seqs if kv_need else 0.0
    fit = int(room // per_seq) if per_seq > 0 and room > 0 else 0
    return EngineMemory(
        budget=budget,
        weights=weights,
        workspace=workspace,
        kv_need=kv_need,
        kv_room=room,
        seqs_fit=fit,
        max_num_seqs=rollout.max_num_seqs,
        pinned_per_node=weights * hardware.node_gpus if rollout.sleep_level == 1 else 0.0,
        node_gpus=hardware.node_gpus,
    )


def rollout_warnings(
    items: list[LineItem], rollout: RolloutSpec | None, hardware: Hardware
) -> tuple[str, ...]:
    """What makes the colocated engine unusable although the sum may fit: a KV cache
    short of ``max_num_seqs x max_model_len`` (vLLM then preempts, silently, or does not
    start), pinned host memory beyond ``plan.host_mem_gib``."""
    eng = engine_memory(items, rollout, hardware)
    if eng is None or rollout is None:
        return ()
    out = []
    gmu = rollout.gpu_memory_utilization
    if eng.margin < 0:
        need = (eng.weights + eng.workspace + eng.kv_need) / hardware.gpu_mem_gib
        fix = (
            f"raise gpu_memory_utilization to {need + 0.005:.2f}"
            if need <= 1
            else ("lower max_model_len or shard the engine further")
        )
        what = (
            "vLLM would not start (its KV cache holds no sequence of max_model_len)"
            if eng.seqs_fit == 0
            else f"vLLM would hold {eng.seqs_fit} of the max_num_seqs={rollout.max_num_seqs} "
            "sequences at max_model_len and preempt (recompute) the others, silently"
        )
        out.append(
            f"the rollout engine's KV cache needs {eng.kv_need:.1f} GiB but "
            f"gpu_memory_utilization={gmu} leaves it {eng.kv_room:.1f} GiB: {what}; {fix}, "
            f"or lower max_num_seqs to {max(eng.seqs_fit, 1)} (rollout.engine_options)."
        )
    host = hardware.host_mem_gib
    if host is not None and eng.pinned_per_node > host:
        out.append(
            f"sleep level 1 pins {eng.pinned_per_node:.1f} GiB of host memory per node (the "
            f"engines' weights) but plan.host_mem_gib is {host:g}: use sleep_level 2 (the "
            "weights are reloaded from the checkpoint at wake) or nodes with more memory."
        )
    return tuple(out)
