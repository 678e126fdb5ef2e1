"""Rollout time: prefill and decode of a step's episodes on the colocated engine.

Decode is modelled step by step of the engine. One decode step of an attention group
(``tp x pp`` GPUs; the engine has ``dp`` of them, experts over ``ep`` GPUs) with ``B``
running sequences at context ``c`` takes, per pipeline stage and micro-batch
``b = B / pp``, the larger of

* memory: the stage's weights on one GPU (dense part split over TP, the experts the
  batch touches over EP) plus the KV cache it reads (``b x c`` tokens), over the HBM
  bandwidth at the stated efficiency, and
* compute: the FLOPs of ``b`` tokens (Linear layers, attention over ``c``, the head),

plus the tensor-parallel all-reduces (two per layer), the expert all-to-alls when the
experts span more GPUs than a TP group, a fixed cost per layer (CUDA graphs or eager)
and per step. The decode step is memory-bandwidth-bound at small ``B`` and becomes
compute-bound at large ``B``; which one holds is recorded. A step of the loop decodes
until its longest episode ends: with ``B`` sequences starting together, the running
count falls as the response-length quantiles pass, so the tail runs at small batch.
When there are more episodes than the engine's ``max_num_seqs``, the excess runs at
full concurrency first (continuous batching) and the last ``max_num_seqs`` drain.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from agentgym.generation import stage_ranges
from agentgym.plan.architecture import Architecture, LoraSpec
from agentgym.plan.flops import (
    head_bytes,
    head_flops,
    layer_sums,
    lora_flops,
    touched_share,
)
from agentgym.plan.hardware import Cluster
from agentgym.plan.links import Links
from agentgym.plan.settings import Efficiency
from agentgym.plan.specs import DTYPE_BYTES, RolloutSpec
from agentgym.plan.workload import Workload, episode_lengths


@dataclass
class Tally:
    """Seconds by resource, accumulated as the model walks through a phase."""

    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, resource: str, seconds: float) -> None:
        """Attribute ``seconds`` to ``resource``."""
        if seconds > 0:
            self.seconds[resource] = self.seconds.get(resource, 0.0) + seconds

    def scaled(self, factor: float) -> Tally:
        """A copy with every entry times ``factor``."""
        return Tally({k: v * factor for k, v in self.seconds.items()})

    def merge(self, other: Tally) -> None:
        """Add ``other``'s entries to this tally."""
        for k, v in other.seconds.items():
            self.add(k, v)


@dataclass(frozen=True)
class EngineShape:
    """What a decode step of the engine works on, fixed per engine layout."""

    arch: Architecture
    rollout: RolloutSpec
    weight_dtype: str
    lora: LoraSpec | None
    cluster: Cluster
    eff: Efficiency
    cuda_graphs: bool = True

    @property
    def groups(self) -> int:
        """Attention groups (vLLM data-parallel ranks) over the rollout GPUs."""
        return max(1, self.rollout.dp)


@dataclass(frozen=True)
class StepCost:
    """One decode step: seconds and the share that was memory-bound."""

    seconds: float
    memory_bound: bool
    compute: float
    comm: float
    comm_spans: bool
    overhead: float


@dataclass(frozen=True)
class _Stage:
    """The per-GPU constants of one engine pipeline stage (batch and context apart)."""

    dense_bytes: float
    expert_bytes: float
    flops_per_token: float
    attn_per_ctx: float
    kv_per_ctx: float
    layers: int
    moe_layers: int


class Engine:
    """An engine layout with its per-stage constants computed once; :meth:`step` then
    costs one decode step for any batch and context."""

    def __init__(self, shape: EngineShape) -> None:
        self.shape = shape
        arch, r = shape.arch, shape.rollout
        lin_b = DTYPE_BYTES[shape.weight_dtype]
        kv_b = DTYPE_BYTES[r.kv_cache_dtype]
        nkv = arch.num_key_value_heads
        stages = stage_ranges(arch.num_layers, r.pp, key="pp")
        self.stages: list[_Stage] = []
        for s, layers in enumerate(stages):
            sums = layer_sums(arch, layers.start, layers.stop)
            last = s == len(stages) - 1
            dense = sums.dense_bytes_per_gpu(r.tp, nkv, lin_b)
            flops = sums.dense_flops_per_gpu(r.tp) + 2.0 * sums.active_experts / r.tp
            if last:
                dense += head_bytes(arch, r.tp)
                flops += head_flops(arch) / r.tp
            if shape.lora is not None:
                flops += lora_flops(arch, shape.lora, layers.start, layers.stop) / r.tp
            if arch.attention == "mla":
                kv = sums.kv_values * kv_b  # the latent is whole on every TP rank
            else:
                kv = sums.kv_values * kv_b * max(1.0, nkv / r.tp) / max(nkv, 1)
            self.stages.append(
                _Stage(
                    dense_bytes=dense,
                    expert_bytes=sums.experts / r.ep * lin_b,
                    flops_per_token=flops,
                    attn_per_ctx=sums.attn_decode / r.tp,
                    kv_per_ctx=kv,
                    layers=sums.layers,
                    moe_layers=sums.moe_layers,
                )
            )
        eff, cl = shape.eff, shape.cluster
        self.links = Links(cl, eff)
        self.hbm = cl.hbm_bytes_per_s * eff.hbm
        self.peak = cl.gpu.flops(shape.weight_dtype) * eff.decode_flops
        per_layer = (
            eff.decode_layer_overhead_us if shape.cuda_graphs else eff.eager_layer_overhead_us
        )
        self.layer_overhead = per_layer * 1e-6
        self.stage_spans = cl.spans_nodes(r.tp * r.pp) and r.pp > 1

    def step(self, batch: float, ctx: float) -> StepCost:
        """One decode step of an attention group with ``batch`` running sequences."""
        shape = self.shape
        arch, r, cl = shape.arch, shape.rollout, shape.cluster
        b = max(batch / r.pp, 1.0) if r.pp > 1 else max(batch, 1.0)
        share = 1.0
        if arch.is_moe:  # the EP group serves ep / tp attention ranks in lockstep
            share = touched_share(b * r.ep / r.tp, arch.num_experts_per_tok, arch.n_routed_experts)
        h_bytes = b * arch.hidden_size * 2
        best = None
        for st in self.stages:
            t_mem = (st.dense_bytes + st.expert_bytes * share + b * ctx * st.kv_per_ctx) / self.hbm
            t_flop = b * (st.flops_per_token + ctx * st.attn_per_ctx) / self.peak
            comm, spans = 0.0, False
            if r.tp > 1:
                comm += 2 * st.layers * self.links.all_reduce(h_bytes, r.tp)
                spans = cl.spans_nodes(r.tp)
            if arch.is_moe and r.ep > r.tp and st.moe_layers:
                t, s = self.links.all_to_all(h_bytes / r.tp * arch.num_experts_per_tok, r.ep)
                comm += 2 * st.moe_layers * t
                spans = spans or s
            cost = (
                max(t_mem, t_flop),
                t_mem >= t_flop,
                comm,
                spans,
                st.layers * self.layer_overhead,
            )
            if best is None or cost[0] + cost[2] + cost[4] > best[0] + best[2] + best[4]:
                best = cost
        assert best is not None
        compute, mem_bound, comm, spans, overhead = best
        p2p = (r.pp - 1) * self.links.p2p(h_bytes, spans=self.stage_spans)
        fixed = shape.eff.decode_step_overhead_ms * 1e-3
        return StepCost(
            seconds=r.pp * (compute + comm + overhead) + p2p + fixed,
            memory_bound=mem_bound,
            compute=r.pp * compute,
            comm=r.pp * comm + p2p,
            comm_spans=spans or self.stage_spans,
            overhead=r.pp * overhead + fixed,
        )


def decode_step(shape: EngineShape, batch: float, ctx: float) -> StepCost:
    """One decode step of an attention group with ``batch`` running sequences."""
    return Engine(shape).step(batch, ctx)


@dataclass(frozen=True)
class RolloutTime:
    """The rollout phase of one step.

    Attributes:
        prefill / decode: seconds (generation rounds included).
        tail_idle: decode seconds beyond what the same tokens would take at full
            concurrency (the all-sync loop waiting for its longest episodes).
        memory_bound_share: share of decode compute seconds that were bandwidth-bound.
        tally: seconds by resource.
        flops: useful FLOPs of the phase (all GPUs).
        full_batch_tokens_per_s: decode tokens/s per GPU at full concurrency.
    """

    prefill: float
    decode: float
    tail_idle: float
    memory_bound_share: float
    tally: Tally
    flops: float
    full_batch_tokens_per_s: float


@dataclass(frozen=True)
class DecodePhase:
    """The decode part of a rollout on one group of GPUs that serves ``per_group``
    episodes at up to ``concurrency`` at a time.

    Attributes:
        seconds: until the longest episode ends.
        tail_idle: seconds beyond what the same tokens take at full concurrency.
        memory_bound_share: share of the compute seconds that were bandwidth-bound.
        tally: seconds by resource.
        full: one decode step at full concurrency and mean context.
        concurrency: sequences decoded together at full concurrency.
    """

    seconds: float
    tail_idle: float
    memory_bound_share: float
    tally: Tally
    full: StepCost
    concurrency: float


def decode_phase(
    step: Callable[[float, float], StepCost], work: Workload, per_group: float, concurrency: int
) -> DecodePhase:
    """Walk the response-length quantiles of ``work`` with a decode-step cost function.

    ``step(batch, ctx)`` costs one decode step of ``batch`` sequences at context ``ctx``.
    Episodes beyond ``concurrency`` run at full concurrency first (continuous
    batching); then the last ``concurrency`` drain as their lengths pass, so the
    running batch shrinks through the tail.
    """
    tally = Tally()
    conc = min(per_group, concurrency)
    lengths = episode_lengths(work)
    k = len(lengths)
    ctx_avg = work.prompt_tokens + work.response_tokens / 2
    mem_s = comp_s = 0.0

    def run(batch: float, ctx: float, steps: float) -> float:
        nonlocal mem_s, comp_s
        if steps <= 0 or batch <= 0:
            return 0.0
        cost = step(batch, ctx)
        if cost.memory_bound:
            mem_s += cost.compute * steps
        else:
            comp_s += cost.compute * steps
        tally.add("HBM bandwidth" if cost.memory_bound else "compute", cost.compute * steps)
        tally.add("network" if cost.comm_spans else "NVLink", cost.comm * steps)
        tally.add("launch/host overhead", cost.overhead * steps)
        return cost.seconds * steps

    decode = 0.0
    if per_group > conc:
        steady_steps = (per_group - conc) * work.response_tokens * work.conversations / conc
        decode += run(conc, ctx_avg, steady_steps)
    prev = 0.0
    for i, length in enumerate(lengths):
        running = conc * (k - i) / k
        if length > prev:
            pieces = max(1, min(4, math.ceil((length - prev) / 1024)))
            width = (length - prev) / pieces
            for j in range(pieces):
                mid = prev + (j + 0.5) * width
                ctx = work.prompt_tokens + mid if work.conversations == 1 else ctx_avg
                decode += run(running, ctx, width)
            prev = length
    full = step(conc, ctx_avg)
    ideal = per_group * work.response_tokens * work.conversations / conc * full.seconds
    return DecodePhase(
        seconds=decode,
        tail_idle=max(0.0, decode - ideal),
        memory_bound_share=mem_s / (mem_s + comp_s) if mem_s + comp_s else 0.0,
        tally=tally,
        full=full,
        concurrency=conc,
    )


def prefill_flops(arch: Architecture, work: Workload) -> float:
    """FLOPs of the step's prompts; a prompt the group shares is prefilled once (the
    engine's prefix cache)."""
    prompts = work.sequences * work.prompt_tokens
    if work.group_size > 1:
        prompts -= work.episodes * work.prompt_tokens * (1 - 1 / work.group_size)
    sums = layer_sums(arch, 0, arch.num_layers)
    return prompts * (sums.matmul_flops() + sums.attn_train * work.prompt_tokens / 2)


def rollout_time(shape: EngineShape, work: Workload, rounds: float = 1.0) -> RolloutTime:
    """Prefill and decode seconds of one step's episodes (see the module docstring)."""
    arch, r, cl, eff = shape.arch, shape.rollout, shape.cluster, shape.eff
    groups = shape.groups
    engine = Engine(shape)
    dec = decode_phase(engine.step, work, work.episodes / groups, r.max_num_seqs)
    pf = prefill_flops(arch, work)
    prefill = pf / (r.gpus * cl.gpu.flops(shape.weight_dtype) * eff.prefill)
    sums = layer_sums(arch, 0, arch.num_layers)
    ctx_avg = work.prompt_tokens + work.response_tokens / 2
    decode_flops = work.response_total * (
        sums.matmul_flops() + head_flops(arch) + sums.attn_decode * ctx_avg
    )
    tally = dec.tally.scaled(rounds)
    tally.add("compute", prefill * rounds)
    return RolloutTime(
        prefill=prefill * rounds,
        decode=dec.seconds * rounds,
        tail_idle=dec.tail_idle * rounds,
        memory_bound_share=dec.memory_bound_share,
        tally=tally,
        flops=(pf + decode_flops) * rounds,
        full_batch_tokens_per_s=dec.concurrency / dec.full.seconds / (r.gpus / groups),
    )


def engine_weight_bytes(shape: EngineShape) -> float:
    """Bytes of the engine's weights on its fullest GPU (what sleep mode moves)."""
    arch, r = shape.arch, shape.rollout
    lin_b = DTYPE_BYTES[shape.weight_dtype]
    worst = 0.0
    stages = stage_ranges(arch.num_layers, r.pp, key="pp")
    for s, layers in enumerate(stages):
        sums = layer_sums(arch, layers.start, layers.stop)
        w = sums.dense_bytes_per_gpu(r.tp, arch.num_key_value_heads, lin_b)
        w += sums.experts / r.ep * lin_b
        if s == 0 or s == len(stages) - 1:
            w += head_bytes(arch, r.tp)
        worst = max(worst, w)
    return worst
