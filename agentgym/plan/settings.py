"""The ``plan:`` section's sub-sections for time and search: workload, efficiency, search.

These are plain config dataclasses (YAML in, ``section.key=value`` overrides) that the
time model (:mod:`.timing`) and the layout search (:mod:`.search`) read. Every number in
:class:`Efficiency` is an assumption, stated with its reason, chosen once for all the
published figures docs/plan.md compares against (not fitted per figure), and
overridable per run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentgym import config_check
from agentgym.plan.workload import DISTRIBUTIONS


@dataclass
class WorkloadSettings:
    """``plan.workload``: what a step generates, beyond the trainer's own sections.

    The episode count comes from the trainer (``rollout.batch_tasks x
    rollout.group_size``), the response cap from ``rollout.max_tokens``.

    Attributes:
        prompt_tokens: mean prompt tokens per conversation (task, memory summary,
            observations).
        response_tokens: mean response tokens per conversation (``null``: a third of the
            cap).
        length_distribution: ``exponential`` (capped, long tail), ``uniform`` or
            ``fixed``.
        conversations: conversations per episode (memory-summary turns).
        env_seconds: env and reward seconds on a step's critical path, GPUs idle.
        generation_rounds: mean generation rounds per step (dynamic sampling refills).
    """

    prompt_tokens: int = 512
    response_tokens: int | None = None
    length_distribution: str = "exponential"
    conversations: int = 1
    env_seconds: float = 0.0
    generation_rounds: float = 1.0

    def __post_init__(self) -> None:
        config_check(
            self.length_distribution in DISTRIBUTIONS,
            f"plan.workload.length_distribution must be one of {DISTRIBUTIONS}, got "
            f"{self.length_distribution!r}.",
        )
        config_check(self.prompt_tokens >= 0, "plan.workload.prompt_tokens must be >= 0.")
        config_check(
            self.response_tokens is None or self.response_tokens > 0,
            "plan.workload.response_tokens must be > 0 (or null).",
        )
        config_check(self.conversations >= 1, "plan.workload.conversations must be >= 1.")
        config_check(self.env_seconds >= 0, "plan.workload.env_seconds must be >= 0.")
        config_check(self.generation_rounds >= 1, "plan.workload.generation_rounds must be >= 1.")


@dataclass(frozen=True)
class Efficiency:
    """``plan.efficiency``: what share of each peak real kernels reach, and fixed costs.

    Attributes:
        gemm: share of peak FLOP/s of training matrix products (Megatron-class GEMMs on
            Hopper reach 60-70% alone; 0.5 leaves room for the small and grouped ones).
        prefill: share of peak FLOP/s during prompt prefill.
        decode_flops: share of peak FLOP/s of a decode step when it is compute-bound.
        hbm: share of HBM bandwidth a memory-bound step streams at (weights, KV cache).
        nvlink / network: share of link bandwidth collectives reach (NCCL bus bandwidth).
        nvlink_latency_us / network_latency_us: fixed cost of one collective in a node /
            across nodes.
        moe_imbalance: the busiest expert-parallel rank's load over the mean.
        train_layer_overhead_us: fixed cost per layer per training pass (kernel
            launches, the host sync of MoE token counts, Python).
        decode_step_overhead_ms: fixed cost per decode step (scheduler, sampler).
        decode_layer_overhead_us: per layer per decode step with CUDA graphs.
        eager_layer_overhead_us: the same without CUDA graphs (``enforce_eager``).
        pcie_gbps: host <-> GPU copies, GB/s per GPU (sleep mode, offload).
        host_io_gbps: reading and writing files, GB/s (the adapter each step; the base
            weights at a level-2 wake, which vLLM reloads from the checkpoint).
        sync_fixed_s: fixed seconds of a weight or adapter sync (engine side).
        engine_start_s: seconds a colocated engine's first start takes beyond reading its
            weights: profiling its working set, allocating the KV cache, capturing CUDA
            graphs (vLLM on a large MoE model: about a minute; an assumption).
    """

    gemm: float = 0.5
    prefill: float = 0.5
    decode_flops: float = 0.4
    hbm: float = 0.6
    nvlink: float = 0.7
    network: float = 0.7
    nvlink_latency_us: float = 8.0
    network_latency_us: float = 20.0
    moe_imbalance: float = 1.2
    train_layer_overhead_us: float = 300.0
    decode_step_overhead_ms: float = 4.0
    decode_layer_overhead_us: float = 250.0
    eager_layer_overhead_us: float = 750.0
    pcie_gbps: float = 25.0
    host_io_gbps: float = 5.0
    sync_fixed_s: float = 2.0
    engine_start_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("gemm", "prefill", "decode_flops", "hbm", "nvlink", "network"):
            value = getattr(self, name)
            config_check(0 < value <= 1, f"plan.efficiency.{name} must be in (0, 1], got {value}.")
        config_check(self.moe_imbalance >= 1, "plan.efficiency.moe_imbalance must be >= 1.")
        config_check(self.engine_start_s >= 0, "plan.efficiency.engine_start_s must be >= 0.")
        for name in ("pcie_gbps", "host_io_gbps"):
            config_check(getattr(self, name) > 0, f"plan.efficiency.{name} must be > 0.")


@dataclass
class SearchSettings:
    """``plan.search``: the space ``agentgym plan --search`` enumerates.

    Empty lists mean "every value that fits the model and the GPUs" for the layout
    dimensions, and "the config's own value" for the choices that change what is
    learned (base quantization, LoRA rank and targets): the search widens those only
    when asked, because a faster but different adapter is not the same experiment.

    Attributes:
        top: how many layouts to print.
        tp / pp / ep / zero_stages / micro_batch_sizes: training layouts to try.
        activation_checkpointing: with and/or without full checkpointing.
        base_weights: frozen-base dtypes to try (``[]``: ``plan.base_weights``).
        lora_ranks: ranks to try (``[]``: ``lora.r``).
        lora_targets: target sets to try, each ``attention``, ``attention+experts``,
            ``all`` (every Linear and the experts) or a list of module names (``[]``:
            the config's).
        rollout_tp / rollout_pp: rollout engine layouts to try.
        rollout_expert_parallel: experts over the engine's ``tp x dp`` GPUs, or sliced.
        max_num_seqs: engine concurrency to try.
        sleep_levels: engine sleep levels to try (0 keeps the engine on the GPU).
        tp_within_node: tensor parallelism stays inside a node.
    """

    top: int = 5
    tp: list[int] = field(default_factory=list)
    pp: list[int] = field(default_factory=list)
    ep: list[int] = field(default_factory=list)
    zero_stages: list[int] = field(default_factory=lambda: [0, 1, 2, 3])
    micro_batch_sizes: list[int] = field(default_factory=lambda: [1, 2, 4])
    activation_checkpointing: list[bool] = field(default_factory=lambda: [True, False])
    base_weights: list[str] = field(default_factory=list)
    lora_ranks: list[int] = field(default_factory=list)
    lora_targets: list[str | list[str]] = field(default_factory=list)
    rollout_tp: list[int] = field(default_factory=list)
    rollout_pp: list[int] = field(default_factory=list)
    rollout_expert_parallel: list[bool] = field(default_factory=lambda: [True, False])
    max_num_seqs: list[int] = field(default_factory=lambda: [32, 64, 128, 256, 512, 1024])
    sleep_levels: list[int] = field(default_factory=lambda: [0, 1, 2])
    tp_within_node: bool = True

    def __post_init__(self) -> None:
        config_check(self.top >= 1, "plan.search.top must be >= 1.")
        for name in ("tp", "pp", "ep", "micro_batch_sizes", "lora_ranks", "rollout_tp"):
            for value in getattr(self, name):
                config_check(
                    isinstance(value, int) and value >= 1,
                    f"plan.search.{name} holds positive integers, got {value!r}.",
                )
        for value in self.zero_stages:
            config_check(value in (0, 1, 2, 3), f"plan.search.zero_stages: {value!r}.")
        for value in self.sleep_levels:
            config_check(value in (0, 1, 2), f"plan.search.sleep_levels: {value!r}.")
