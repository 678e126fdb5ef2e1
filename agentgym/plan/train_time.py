"""Training time: forward, recomputation, backward, communication and the 1F1B pipeline.

Per micro-batch and pipeline stage (``tp x dp`` GPUs; experts over ``ep`` of them), on
one GPU:

* forward: each group of matrix products (dense and the head; routed experts, times the
  load of the busiest expert rank) takes the larger of its FLOPs over the peak (fp8
  tensor cores for an fp8 frozen base) at the stated GEMM efficiency and its weight
  bytes over HBM; attention over the causal context runs at the bf16 peak;
* recomputation (full activation checkpointing) runs the forward again;
* backward: the gradient with respect to the activations costs one forward's matrix
  products and twice its attention; a full fine-tune adds the weight gradients (one
  more forward's products, and the fp32 gradient accumulation bytes); LoRA adds only
  the adapter's rank-r products;
* communication, not overlapped: with sequence parallelism two all-gathers and two
  reduce-scatters per layer and pass over the TP group, one dispatch and one combine
  all-to-all per MoE layer and pass over the EP group, a send/receive per stage
  boundary; plus a fixed cost per layer and pass.

1F1B runs ``m + pp - 1`` slots of the slowest stage per optimizer step (``m``
micro-batches per replica), so the bubble is ``(pp - 1)`` slots, once per run of the
schedule (``ceil(m / window)`` runs with ``distributed.pp_window``). Then the gradient
all-reduce over the data-parallel replicas of each trainable weight and an AdamW step
that streams its states through HBM. Log-prob passes (no gradient) are forwards through
the same pipeline.

A critic (PPO/VAPO: ``lora.critic_r`` and ``work.critic_passes``) adds, per mini-batch,
that many passes of its own through the same pipeline (forward, recomputation and the
activations' backward through the frozen base, its rank-``critic_r`` adapter on the
policy's non-expert targets, the value head instead of the LM head), each a schedule
run with its own bubble, and for each extra pass a critic-only gradient sync and AdamW
step; its valuation of the batch is one more log-prob pass (``work.logprob_passes``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache, partial

from agentgym.generation import stage_ranges
from agentgym.plan.architecture import (
    Architecture,
    LoraSpec,
    critic_spec,
    trained_adapter_elems,
)
from agentgym.plan.flops import head_bytes, head_flops, layer_sums, lora_flops
from agentgym.plan.hardware import Cluster
from agentgym.plan.links import Links
from agentgym.plan.rollout_time import Tally
from agentgym.plan.settings import Efficiency
from agentgym.plan.specs import DTYPE_BYTES, ParallelSpec
from agentgym.plan.workload import Workload


@dataclass(frozen=True)
class TrainTime:
    """The training phase of one step, seconds.

    Attributes:
        compute: forward, recomputation and backward of every micro-batch (slowest
            stage).
        comm: tensor-, expert- and pipeline-parallel communication of those passes.
        overhead: the fixed per-layer costs.
        bubble: the 1F1B pipeline bubble.
        logprobs: the forward-only log-prob passes (bubbles included).
        grad_sync: data-parallel gradient reduction.
        optimizer: the AdamW step.
        offload: moving the trainer's state to the host and back around rollout.
        useful_flops: forward + backward FLOPs of the update (no recomputation, no
            log-prob passes), all GPUs: the MFU numerator.
        tally: seconds by resource.
    """

    compute: float
    comm: float
    overhead: float
    bubble: float
    logprobs: float
    grad_sync: float
    optimizer: float
    offload: float
    useful_flops: float
    logprob_flops: float
    tally: Tally

    @property
    def total(self) -> float:
        """Seconds of the whole training phase."""
        return (
            self.compute
            + self.comm
            + self.overhead
            + self.bubble
            + self.logprobs
            + self.grad_sync
            + self.optimizer
            + self.offload
        )


_lora_elems = lru_cache(maxsize=4096)(trained_adapter_elems)


@dataclass(frozen=True)
class _Slot:
    """One micro-batch on one GPU of a stage: training passes and the forward alone."""

    compute: float
    comm: float
    comm_spans: bool
    overhead: float
    fwd: float
    fwd_comm: float
    fwd_overhead: float
    memory_bound: float


@lru_cache(maxsize=16384)
def _slot(
    arch: Architecture,
    layers: range,
    *,
    first: bool,
    last: bool,
    tokens: float,
    seq: float,
    lora: LoraSpec | None,
    parallel: ParallelSpec,
    base_dtype: str,
    checkpointing: bool,
    cluster: Cluster,
    eff: Efficiency,
) -> _Slot:
    """Seconds of one micro-batch on one GPU of a stage (see the module docstring)."""
    tp, ep = parallel.tp, parallel.ep
    sums = layer_sums(arch, layers.start, layers.stop)
    links = Links(cluster, eff)
    gpu = cluster.gpu
    lin_b = DTYPE_BYTES[base_dtype if lora is not None else "bf16"]
    peak_w = gpu.flops(base_dtype) if lora is not None else gpu.flops("bf16")
    peak16 = gpu.flops("bf16")
    hbm = cluster.hbm_bytes_per_s * eff.hbm

    def roof(flops: float, nbytes: float, peak: float) -> tuple[float, float]:
        t_f, t_m = flops / (peak * eff.gemm), nbytes / hbm
        return max(t_f, t_m), (t_m if t_m > t_f else 0.0)

    dense_f = tokens * sums.dense_flops_per_gpu(tp)
    dense_w = sums.dense_bytes_per_gpu(tp, arch.num_key_value_heads, lin_b)
    exp_f = tokens * 2.0 * sums.active_experts / tp * eff.moe_imbalance
    exp_w = sums.experts / ep * lin_b
    head_f = tokens * head_flops(arch) / tp if last else 0.0
    head_w = head_bytes(arch, tp) if last else 0.0
    attn = tokens * seq / 2 * sums.attn_train / tp / (peak16 * eff.gemm)
    adapter = tokens * lora_flops(arch, lora, layers.start, layers.stop) / tp if lora else 0.0
    adapter_t = adapter / (peak16 * eff.gemm)
    d, dm = roof(dense_f, dense_w, peak_w)
    e, em = roof(exp_f, exp_w, peak_w)
    h, hm = roof(head_f, head_w, peak16)
    fwd = d + e + h + attn + adapter_t
    membound = dm + em + hm
    bwd = d + e + h + 2 * attn + 2 * adapter_t
    if lora is None:  # weight gradients, accumulated in fp32
        params = dense_w / lin_b + exp_w / lin_b + head_w / 2
        wg, wgm = roof(dense_f + exp_f + head_f, params * 8.0, peak16)
        bwd += wg
        membound += wgm
    passes = 3 if checkpointing else 2
    compute = fwd * (passes - 1) + bwd
    h_bytes = tokens * arch.hidden_size * 2
    comm, spans = 0.0, cluster.spans_nodes(tp) and tp > 1
    fwd_comm = 0.0
    if tp > 1:
        per = (
            4 * links.all_gather(h_bytes, tp)
            if parallel.sequence_parallel
            else 2 * links.all_reduce(h_bytes, tp)
        )
        fwd_comm += sums.layers * per
    if arch.is_moe and ep > 1 and sums.moe_layers:
        t, s = links.all_to_all(tokens / tp * arch.num_experts_per_tok * arch.hidden_size * 2, ep)
        fwd_comm += 2 * sums.moe_layers * t
        spans = spans or s
    comm = fwd_comm * passes
    if parallel.pp > 1:
        stage_spans = parallel.tp * parallel.dp >= cluster.gpus_per_node
        hop = links.p2p(h_bytes / tp, spans=stage_spans)
        comm += 2 * hop  # activations forward, their gradients back
        fwd_comm += hop
        spans = spans or stage_spans
    overhead = sums.layers * passes * eff.train_layer_overhead_us * 1e-6
    return _Slot(
        compute=compute,
        comm=comm,
        comm_spans=spans,
        overhead=overhead,
        fwd=fwd,
        fwd_comm=fwd_comm,
        fwd_overhead=sums.layers * eff.train_layer_overhead_us * 1e-6,
        memory_bound=membound * passes,
    )


def _stage_slots(
    arch: Architecture,
    stages: list[range],
    *,
    adapter: LoraSpec | None,
    head: bool,
    tokens: float,
    work: Workload,
    parallel: ParallelSpec,
    base_dtype: str,
    checkpointing: bool,
    cluster: Cluster,
    eff: Efficiency,
) -> list[_Slot]:
    """One micro-batch's slot on each pipeline stage (``head``: the last has the LM head)."""
    slot_layout = replace(parallel, zero_stage=1)  # a slot does not depend on ZeRO
    return [
        _slot(
            arch,
            layers,
            first=s == 0,
            last=head and s == parallel.pp - 1,
            tokens=tokens,
            seq=work.seq_tokens,
            lora=adapter,
            parallel=slot_layout,
            base_dtype=base_dtype,
            checkpointing=checkpointing,
            cluster=cluster,
            eff=eff,
        )
        for s, layers in enumerate(stages)
    ]


def _slowest(slots: list[_Slot]) -> _Slot:
    """The stage whose training slot takes longest."""
    return max(slots, key=lambda x: x.compute + x.comm + x.overhead)


def _trainable_per_gpu(
    arch: Architecture, lora: LoraSpec | None, stages: list[range], parallel: ParallelSpec
) -> tuple[float, float]:
    """Trainable (dense, expert) values per GPU of the stage that holds the most."""
    tp, pp, ep = parallel.tp, parallel.pp, parallel.ep
    dense = expert = 0.0
    for s, layers in enumerate(stages):
        if lora is not None:
            d, e = _lora_elems(arch, lora, layers.start, layers.stop, tp, ep)
        else:
            sums = layer_sums(arch, layers.start, layers.stop)
            d = sums.dense / tp + sums.small
            e = sums.experts / ep
            d += arch.vocab_size * arch.hidden_size / tp * ((s == 0) + (s == pp - 1))
        if d + e > dense + expert:
            dense, expert = d, e
    return dense, expert


@dataclass(frozen=True)
class _Update:
    """The costs of a step beyond its passes: gradient sync, AdamW and state offload."""

    grad_sync: float
    optimizer: float
    offload: float
    dp_spans: bool


def _update(
    arch: Architecture,
    *,
    lora: LoraSpec | None,
    critic: LoraSpec | None,
    k: int,
    u: int,
    stages: list[range],
    parallel: ParallelSpec,
    cluster: Cluster,
    eff: Efficiency,
    links: Links,
    offload_state: bool,
) -> _Update:
    """Seconds of the gradient sync, the optimizer steps and the offload of the worst stage."""
    tp, dp, ep = parallel.tp, parallel.dp, parallel.ep
    # trainable values per GPU (worst stage): gradient sync and optimizer
    dense, expert = _trainable_per_gpu(arch, lora, stages, parallel)
    grad_b = 4.0 if lora is not None else 2.0
    dp_spans = tp * dp > cluster.gpus_per_node
    expert_dp = max(1, tp * dp // ep)
    grad_sync = u * (
        links.all_reduce(dense * grad_b, dp, spans=dp_spans and dp > 1)
        + links.all_reduce(expert * grad_b, expert_dp, spans=dp_spans and expert_dp > 1)
    )
    # ZeRO-1 and up (Megatron's distributed optimizer) shard the optimizer states
    shard = dense / dp + expert / expert_dp if parallel.zero_stage >= 1 else dense + expert
    optimizer = u * shard * 36.0 / (cluster.hbm_bytes_per_s * eff.hbm)
    if k > 1 and critic is not None:  # the critic-only steps: its gradients and states
        c = max(_lora_elems(arch, critic, r.start, r.stop, tp, ep)[0] for r in stages)
        grad_sync += u * (k - 1) * links.all_reduce(c * grad_b, dp, spans=dp_spans and dp > 1)
        c_shard = c / dp if parallel.zero_stage >= 1 else c
        optimizer += u * (k - 1) * c_shard * 36.0 / (cluster.hbm_bytes_per_s * eff.hbm)
    offload = 0.0
    if offload_state:
        state = shard * 12.0 + (dense + expert) * (2.0 + grad_b)
        offload = 2 * links.pcie(state)
    return _Update(grad_sync, optimizer, offload, dp_spans)


def _useful_flops(
    arch: Architecture,
    work: Workload,
    lora: LoraSpec | None,
    critic: LoraSpec | None,
    k: int,
) -> tuple[float, float]:
    """FLOPs of the update (forward + backward, no recomputation) and of the log-prob passes."""
    sums = layer_sums(arch, 0, arch.num_layers)
    per_token_fwd = sums.matmul_flops() + head_flops(arch)
    attn = sums.attn_train * work.seq_tokens / 2
    adapter = lora_flops(arch, lora, 0, arch.num_layers) if lora is not None else 0.0
    bwd_factor = 2.0 if lora is None else 1.0
    useful = work.train_tokens * (per_token_fwd * (1 + bwd_factor) + 3 * attn + 3 * adapter)
    if k and critic is not None:  # forward and the activations' backward, no LM head
        critic_fwd = sums.matmul_flops()
        critic_adapter = lora_flops(arch, critic, 0, arch.num_layers)
        useful += k * work.train_tokens * (2 * critic_fwd + 3 * attn + 3 * critic_adapter)
    lp_flops = work.logprob_passes * work.train_tokens * (per_token_fwd + attn + adapter)
    return useful, lp_flops


def train_time(
    arch: Architecture,
    *,
    work: Workload,
    lora: LoraSpec | None,
    parallel: ParallelSpec,
    base_dtype: str,
    micro_batch_size: int,
    checkpointing: bool,
    cluster: Cluster,
    eff: Efficiency,
    offload_state: bool = False,
    pipeline_window: int = 0,
) -> TrainTime:
    """Seconds of the update (and its log-prob passes) for one step's batch."""
    pp, dp = parallel.pp, parallel.dp
    links = Links(cluster, eff)
    seqs = work.sequences
    per_replica = seqs / (dp * work.updates)
    m = max(1, math.ceil(per_replica / micro_batch_size))
    tokens = work.train_tokens / (work.updates * dp * m)
    stages = stage_ranges(arch.num_layers, pp, key="pp")
    stage_slots = partial(
        _stage_slots,
        arch,
        stages,
        tokens=tokens,
        work=work,
        parallel=parallel,
        base_dtype=base_dtype,
        checkpointing=checkpointing,
        cluster=cluster,
        eff=eff,
    )
    slots = stage_slots(adapter=lora, head=True)
    worst = _slowest(slots)
    slot = worst.compute + worst.comm + worst.overhead
    u = work.updates
    compute, comm, overhead = u * m * worst.compute, u * m * worst.comm, u * m * worst.overhead
    runs = math.ceil(m / pipeline_window) if pipeline_window and pp > 1 else 1
    bubble = u * runs * (pp - 1) * slot
    membound = u * m * worst.memory_bound
    critic = critic_spec(lora) if lora is not None else None
    k = work.critic_passes if critic is not None else 0
    if k:  # the critic's passes: its own adapter, the value head instead of the LM head
        cw = _slowest(stage_slots(adapter=critic, head=False))
        compute += u * k * m * cw.compute
        comm += u * k * m * cw.comm
        overhead += u * k * m * cw.overhead
        bubble += u * k * runs * (pp - 1) * (cw.compute + cw.comm + cw.overhead)
        membound += u * k * m * cw.memory_bound
    fwd = max(slots, key=lambda x: x.fwd + x.fwd_comm + x.fwd_overhead)
    fwd_slot = fwd.fwd + fwd.fwd_comm + fwd.fwd_overhead
    logprobs = work.logprob_passes * (u * m + pp - 1) * fwd_slot
    up = _update(
        arch,
        lora=lora,
        critic=critic,
        k=k,
        u=u,
        stages=stages,
        parallel=parallel,
        cluster=cluster,
        eff=eff,
        links=links,
        offload_state=offload_state,
    )
    useful, lp_flops = _useful_flops(arch, work, lora, critic, k)
    tally = Tally()
    tally.add("HBM bandwidth", membound + up.optimizer)
    tally.add("compute", compute - membound)
    tally.add("network" if worst.comm_spans else "NVLink", comm)
    tally.add("network" if up.dp_spans else "NVLink", up.grad_sync)
    tally.add("launch/host overhead", overhead)
    tally.add("pipeline bubble", bubble)
    tally.add("compute", logprobs)
    tally.add("PCIe", up.offload)
    return TrainTime(
        compute=compute,
        comm=comm,
        overhead=overhead,
        bubble=bubble,
        logprobs=logprobs,
        grad_sync=up.grad_sync,
        optimizer=up.optimizer,
        offload=up.offload,
        useful_flops=useful,
        logprob_flops=lp_flops,
        tally=tally,
    )
