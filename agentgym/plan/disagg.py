"""Disaggregated MoE rollout serving, after MegaScale-Infer (Zhu et al., arXiv 2504.02263).

On paper only: this project's rollout engines (HF generate, vLLM) do not implement it.
The planner models it so that a user can see what it would buy for the rollout phase.

The idea: attention (with its KV cache) and the routed experts run on different GPUs,
sized separately. ``n_a`` attention GPUs hold the attention, the dense layers and the
shared experts (replicated over ``n_a / tp_a`` attention replicas, TP inside a node) and
every sequence's KV cache; ``n_e`` expert GPUs hold the routed experts of every layer
(``E / n_e`` each). A decode batch is split into ``m`` micro-batches that ping-pong:
while the expert GPUs run micro-batch ``i`` of a layer, the attention GPUs run
micro-batch ``i + 1``; tokens cross from the ``M`` attention GPUs to the ``N`` expert
GPUs and back (M:N dispatch and combine, over the inter-node fabric).

Per layer and micro-batch of ``b`` sequences per attention replica:

* ``T_a``: the larger of (attention-side weights per GPU + the KV cache of ``b``
  sequences) over HBM and their FLOPs over peak, plus the TP all-reduce and half the
  per-layer kernel floor;
* ``T_e``: on one expert GPU, the larger of (its experts' weights the micro-batch
  touches) over HBM and ``b x replicas x top-k / n_e`` tokens' expert FLOPs over peak,
  plus half the kernel floor;
* ``T_c``: one dispatch or combine of the micro-batch's tokens over the fabric.

A layer takes ``max(m x T_a, m x T_e, T_a + T_e + 2 T_c)``: each side is busy ``m``
times per layer, and one micro-batch's round trip must fit (MegaScale-Infer's condition
for hiding the communication). The gain over colocation comes from the expert GEMMs
seeing the tokens of every attention replica (larger, better-used batches) and from
attention GPUs streaming only attention weights and KV; the cost is that expert
weights are read once per micro-batch, so at small batch (the all-sync tail) it loses.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentgym.plan.architecture import Architecture
from agentgym.plan.flops import head_bytes, head_flops, layer_sums, touched_share
from agentgym.plan.hardware import Cluster
from agentgym.plan.links import Links
from agentgym.plan.memory import GIB, ROLLOUT_WORKSPACE_GIB
from agentgym.plan.rollout_time import DecodePhase, StepCost, decode_phase
from agentgym.plan.settings import Efficiency
from agentgym.plan.specs import DTYPE_BYTES
from agentgym.plan.workload import Workload


@dataclass(frozen=True)
class DisaggLayout:
    """Attention GPUs, expert GPUs, TP inside an attention replica, ping-pong micro-batches."""

    attention_gpus: int
    expert_gpus: int
    attention_tp: int
    micro_batches: int

    @property
    def gpus(self) -> int:
        """GPUs of both sides."""
        return self.attention_gpus + self.expert_gpus

    @property
    def replicas(self) -> int:
        """Attention replicas (each serves its own sequences)."""
        return self.attention_gpus // self.attention_tp

    def describe(self) -> str:
        """A one-line description."""
        return (
            f"{self.attention_gpus} attention GPUs (tp={self.attention_tp}) + "
            f"{self.expert_gpus} expert GPUs, {self.micro_batches} micro-batches"
        )


class DisaggEngine:
    """One disaggregated engine; :meth:`step` costs a decode step of the whole batch."""

    def __init__(
        self,
        arch: Architecture,
        layout: DisaggLayout,
        *,
        weight_dtype: str,
        kv_dtype: str,
        cluster: Cluster,
        eff: Efficiency,
    ) -> None:
        if not arch.is_moe:
            raise ValueError("disaggregated expert serving needs an MoE model")
        self.arch, self.layout, self.cluster, self.eff = arch, layout, cluster, eff
        sums = layer_sums(arch, 0, arch.num_layers)
        lin_b = DTYPE_BYTES[weight_dtype]
        tp = layout.attention_tp
        self.layers = arch.num_layers
        self.moe_layers = sums.moe_layers
        self.att_bytes = (
            sums.dense_bytes_per_gpu(tp, arch.num_key_value_heads, lin_b) + head_bytes(arch, tp)
        ) / self.layers
        self.att_flops = (sums.dense_flops_per_gpu(tp) + head_flops(arch) / tp) / self.layers
        self.attn_per_ctx = sums.attn_decode / tp / self.layers
        kv = sums.kv_values * DTYPE_BYTES[kv_dtype] / self.layers
        if arch.attention != "mla":
            kv *= max(1.0, arch.num_key_value_heads / tp) / max(arch.num_key_value_heads, 1)
        self.kv_per_ctx = kv
        self.exp_bytes = sums.experts / self.moe_layers / layout.expert_gpus * lin_b
        self.exp_flops_per_token = 2.0 * sums.active_experts / self.moe_layers  # all top-k
        self.hbm = cluster.hbm_bytes_per_s * eff.hbm
        self.peak = cluster.gpu.flops(weight_dtype) * eff.decode_flops
        self.links = Links(cluster, eff)
        self.attention_weights = self.att_bytes * self.layers
        self.expert_weights = sums.experts / layout.expert_gpus * lin_b

    def times(self, batch: float, ctx: float) -> tuple[float, float, float]:
        """(T_a, T_e, T_c) of one layer for one micro-batch, at ``batch`` sequences."""
        arch, lay, eff = self.arch, self.layout, self.eff
        b = max(batch / (lay.replicas * lay.micro_batches), 1.0)
        floor = 0.5 * eff.decode_layer_overhead_us * 1e-6
        t_mem = (self.att_bytes + b * ctx * self.kv_per_ctx) / self.hbm
        t_flop = b * (self.att_flops + ctx * self.attn_per_ctx) / self.peak
        t_a = max(t_mem, t_flop) + floor
        if lay.attention_tp > 1:
            t_a += 2 * self.links.all_reduce(b * arch.hidden_size * 2, lay.attention_tp)
        tokens = b * lay.replicas  # one micro-batch from every replica
        share = touched_share(tokens, arch.num_experts_per_tok, arch.n_routed_experts)
        e_mem = self.exp_bytes * share / self.hbm
        e_flop = tokens * self.exp_flops_per_token / lay.expert_gpus / self.peak
        t_e = max(e_mem, e_flop) * eff.moe_imbalance + floor
        # M:N dispatch (one copy per chosen expert) of one replica's micro-batch
        nbytes = b * arch.num_experts_per_tok * arch.hidden_size * 2 / lay.attention_tp
        t_c = self.links.p2p(nbytes, spans=True)
        return t_a, t_e, t_c

    def step(self, batch: float, ctx: float) -> StepCost:
        """A decode step (one token for each of ``batch`` sequences)."""
        t_a, t_e, t_c = self.times(batch, ctx)
        m = self.layout.micro_batches
        moe_layer = max(m * t_a, m * t_e, t_a + t_e + 2 * t_c)
        dense_layer = m * t_a
        fixed = self.eff.decode_step_overhead_ms * 1e-3
        total = self.moe_layers * moe_layer + (self.layers - self.moe_layers) * dense_layer
        busy = max(m * t_a, m * t_e)
        return StepCost(
            seconds=total + fixed,
            memory_bound=True,
            compute=self.moe_layers * busy + (self.layers - self.moe_layers) * dense_layer,
            comm=self.moe_layers * (moe_layer - busy),
            comm_spans=True,
            overhead=fixed,
        )

    def memory_gib(self, sequences: float, max_len: int) -> tuple[float, float]:
        """(attention GPU, expert GPU) GiB: weights, KV cache for ``sequences`` at
        ``max_len``, and the workspace."""
        per_replica = sequences / self.layout.replicas
        kv = per_replica * max_len * self.kv_per_ctx * self.layers
        att = (self.attention_weights + kv) / GIB + ROLLOUT_WORKSPACE_GIB
        return att, self.expert_weights / GIB + ROLLOUT_WORKSPACE_GIB


@dataclass(frozen=True)
class DisaggResult:
    """The best disaggregated layout for a workload, and its rollout decode phase."""

    layout: DisaggLayout
    decode: DecodePhase
    tokens_per_s_per_gpu: float
    attention_gib: float
    expert_gib: float


def best_disaggregated(
    arch: Architecture,
    work: Workload,
    *,
    gpus: int,
    budget_gib: float,
    max_len: int,
    weight_dtype: str,
    kv_dtype: str,
    cluster: Cluster,
    eff: Efficiency,
    concurrency: int | None = None,
) -> DisaggResult | None:
    """The disaggregated layout with the shortest decode phase that fits ``budget_gib``
    per GPU (what the engine may use next to the trainer's resident state), or ``None``.

    Attention and expert GPUs come in whole nodes; the expert GPU count divides the
    experts; ``m`` is 2 to 4.
    """
    gpn = cluster.gpus_per_node
    best: DisaggResult | None = None
    conc = concurrency or work.episodes
    for n_e in range(gpn, gpus, gpn):
        n_a = gpus - n_e
        if arch.n_routed_experts % n_e:
            continue
        for tp in (1, 2, 4, 8):
            if tp > gpn or n_a % tp or arch.num_attention_heads % tp:
                continue
            for m in (2, 3, 4):
                layout = DisaggLayout(n_a, n_e, tp, m)
                engine = DisaggEngine(
                    arch,
                    layout,
                    weight_dtype=weight_dtype,
                    kv_dtype=kv_dtype,
                    cluster=cluster,
                    eff=eff,
                )
                att, exp = engine.memory_gib(conc, max_len)
                if max(att, exp) > budget_gib:
                    continue
                dec = decode_phase(engine.step, work, work.episodes, conc)
                key = (dec.seconds, layout.describe())
                if best is None or key < (best.decode.seconds, best.layout.describe()):
                    tps = dec.concurrency / dec.full.seconds / layout.gpus
                    best = DisaggResult(layout, dec, tps, att, exp)
    return best


def throughput_sweep(
    arch: Architecture,
    layout: DisaggLayout,
    colocated_step,
    colocated_gpus_per_group: int,
    colocated_groups: int,
    *,
    ctx: float,
    weight_dtype: str,
    kv_dtype: str,
    cluster: Cluster,
    eff: Efficiency,
    batches: tuple[int, ...] = (16, 64, 256, 1024, 4096),
) -> list[tuple[int, float, float]]:
    """(total sequences, colocated tokens/s/GPU, disaggregated tokens/s/GPU) at full
    concurrency: where one overtakes the other."""
    engine = DisaggEngine(
        arch, layout, weight_dtype=weight_dtype, kv_dtype=kv_dtype, cluster=cluster, eff=eff
    )
    out = []
    for b in batches:
        per_group = max(b / colocated_groups, 1.0)
        col = per_group / colocated_step(per_group, ctx).seconds / colocated_gpus_per_group
        dis = b / engine.step(b, ctx).seconds / layout.gpus
        out.append((b, col, dis))
    return out
