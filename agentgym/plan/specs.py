"""The planner's typed inputs: dtype sizes, training layout, step settings, rollout engine, GPUs.

These are the numbers :mod:`.plans` computes with, already checked. The config section
``plan:`` (:mod:`.config`) and the trainer's own sections are turned into them by
:func:`~agentgym.plan.config.plan_inputs`; tests and scripts may also build them
directly. Error messages name the config key a user would change.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentgym import ConfigError, UnknownNameError

#: bytes per element of each dtype name; the quantized ones include their scales
#: (fp8: one fp32 scale per 128 x 128 block, as DeepSeek-V3 ships; int4: one bf16 scale
#: and one bf16 zero point per group of 128, as in GPTQ/AWQ-style 4-bit checkpoints).
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0 + 4.0 / (128 * 128),
    "int4": 0.5 + 4.0 / 128,
}


@dataclass(frozen=True)
class ParallelSpec:
    """Training layout (the ``plan.parallel`` section). GPUs = tp * pp * dp.

    Attributes:
        tp: tensor parallel size (attention heads, dense MLP, shared experts; with
            ``sequence_parallel`` also the layer inputs).
        ep: expert parallel size: routed experts are split over ``ep`` of the ``tp * dp``
            GPUs of one pipeline stage.
        pp: pipeline stages (contiguous, near-equal runs of layers).
        dp: data-parallel replicas.
        zero_stage: 0 (none), 1 (shard optimizer states), 2 (also gradients) or 3 (also
            the adapter), over the replicas of each weight.
        sequence_parallel: split activations between layers over TP.
        shard_base: FSDP2 shards the frozen base too (the trainer's device mesh): dense
            weights over the ``dp`` replicas, routed experts over their ``tp * dp / ep``
            replicas; a quantized base's Linear weights stay whole (FSDP2 does not shard
            torchao's tensors). Set from the trainer's ``distributed`` mesh.
        experts_only_quantized: a quantized ``base_weights`` dtype applies to the routed
            experts alone, the dense decoder Linears stay bf16 (the trainer's mesh with
            ``model.quantize``: it keeps the experts quantized and dequantizes the rest).
    """

    tp: int = 1
    ep: int = 1
    pp: int = 1
    dp: int = 1
    zero_stage: int = 1
    sequence_parallel: bool = True
    shard_base: bool = False
    experts_only_quantized: bool = False

    def __post_init__(self) -> None:
        for name in ("tp", "ep", "pp", "dp"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"plan.parallel.{name} must be a positive integer, got {value!r}."
                )
        if self.zero_stage not in (0, 1, 2, 3):
            raise ConfigError(
                f"plan.parallel.zero_stage must be 0, 1, 2 or 3, got {self.zero_stage!r}."
            )
        if (self.tp * self.dp) % self.ep:
            raise ConfigError(
                f"plan.parallel.ep={self.ep} must divide tp*dp={self.tp * self.dp} (experts are "
                "split among the GPUs of one pipeline stage)."
            )

    @property
    def gpus(self) -> int:
        """GPUs the layout spans."""
        return self.tp * self.pp * self.dp


@dataclass(frozen=True)
class TrainSpec:
    """One training micro-step. Dtypes are names from :data:`DTYPE_BYTES`.

    ``micro_batch_size`` is the trainer's ``algorithm.micro_batch_size``; the rest come
    from the ``plan`` section (the trainer has no setting for them yet). Without
    ``activation_checkpointing`` every layer keeps what autograd saves for its backward
    (the layout search tries it; a hand-written ``plan:`` section plans with it on).
    """

    micro_batch_size: int = 1
    seq_len: int = 4096
    activation_checkpointing: bool = True
    flash_attention: bool = True
    activation_dtype: str = "bf16"
    lora_dtype: str = "bf16"
    grad_dtype: str = "fp32"
    #: sequences one optimizer step trains on (the step's batch over
    #: ``algorithm.updates_per_batch``): each data-parallel rank runs its share through the
    #: pipeline in one call, whose buffers grow with it; 0: as few as the pipeline needs
    update_sequences: int = 0
    #: the most micro-batches one run of the schedule takes (``distributed.pp_window``;
    #: 0: all of a call's): the buffers are a window's, the bubble one per window
    pipeline_window: int = 0

    def micro_batches(self, pp: int, dp: int) -> int:
        """Micro-batches one data-parallel rank runs through the pipeline in one run of
        the schedule (at least ``pp``: the trainer pads a run with fewer; at most
        ``pipeline_window`` when set)."""
        per_rank = max(pp, -(-self.update_sequences // (dp * self.micro_batch_size)))
        return min(per_rank, max(pp, self.pipeline_window)) if self.pipeline_window else per_rank

    def __post_init__(self) -> None:
        if not isinstance(self.pipeline_window, int) or self.pipeline_window < 0:
            raise ConfigError(
                f"pipeline_window must be a non-negative integer, got {self.pipeline_window!r}."
            )
        if not isinstance(self.update_sequences, int) or self.update_sequences < 0:
            raise ConfigError(
                f"update_sequences must be a non-negative integer, got {self.update_sequences!r}."
            )
        for name in ("micro_batch_size", "seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"plan.{name} must be a positive integer, got {value!r}.")
        for name in ("activation_dtype", "lora_dtype", "grad_dtype"):
            check_dtype(f"plan.{name}", getattr(self, name))


@dataclass(frozen=True)
class RolloutSpec:
    """The rollout engine's layout and cache, in the planner's short names.

    Read from ``rollout.engine_options`` (vLLM's names there: ``tensor_parallel_size``
    is ``tp``, ...). GPUs = tp * pp * dp; routed experts are split over ``ep`` GPUs of a
    stage. ``sleep_level`` 0 means the engine never sleeps (keeps its memory while the
    trainer runs); ``weight_dtype`` None means the training base's dtype.
    """

    engine: str = "vllm"
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    max_num_seqs: int = 64
    max_model_len: int = 8192
    gpu_memory_utilization: float = 0.5
    sleep_level: int = 1
    kv_cache_dtype: str = "bf16"
    weight_dtype: str | None = None

    def __post_init__(self) -> None:
        if self.engine not in ("vllm", "hf"):
            raise UnknownNameError("rollout engine", self.engine, ("vllm", "hf"))
        for name in ("tp", "pp", "dp", "ep", "max_num_seqs", "max_model_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"rollout.{name} must be a positive integer, got {value!r}.")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(
                f"rollout.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}."
            )
        if self.sleep_level not in (0, 1, 2):
            raise ConfigError(f"rollout.sleep_level must be 0, 1 or 2, got {self.sleep_level!r}.")
        check_dtype("rollout.kv_cache_dtype", self.kv_cache_dtype)
        if self.weight_dtype is not None:
            check_dtype("rollout.weight_dtype", self.weight_dtype)
        if (self.tp * self.dp) % self.ep:
            raise ConfigError(
                f"rollout.ep={self.ep} must divide rollout tp*dp={self.tp * self.dp}."
            )

    @property
    def gpus(self) -> int:
        """GPUs one engine spans."""
        return self.tp * self.pp * self.dp


@dataclass(frozen=True)
class Hardware:
    """The GPUs: how many, GiB of memory on each (``plan.gpus``, ``plan.gpu_mem_gib``), and
    how many share a node and its host memory (``plan.gpus_per_node``,
    ``plan.host_mem_gib``: GiB of host memory per node, None when not said)."""

    gpus: int = 8
    gpu_mem_gib: float = 80.0
    gpus_per_node: int = 8
    host_mem_gib: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.gpus, int) or self.gpus < 1:
            raise ConfigError(f"plan.gpus must be a positive integer, got {self.gpus!r}.")
        if not self.gpu_mem_gib > 0:
            raise ConfigError(f"plan.gpu_mem_gib must be positive, got {self.gpu_mem_gib!r}.")
        if not isinstance(self.gpus_per_node, int) or self.gpus_per_node < 1:
            raise ConfigError(f"plan.gpus_per_node must be >= 1, got {self.gpus_per_node!r}.")
        if self.host_mem_gib is not None and not self.host_mem_gib > 0:
            raise ConfigError(f"plan.host_mem_gib must be positive, got {self.host_mem_gib!r}.")

    @property
    def node_gpus(self) -> int:
        """GPUs of one node (fewer when the run is smaller than a node)."""
        return min(self.gpus_per_node, self.gpus)


def check_dtype(where: str, name: str) -> None:
    """Raise "did you mean" unless ``name`` is a dtype of :data:`DTYPE_BYTES`."""
    if name not in DTYPE_BYTES:
        raise UnknownNameError("dtype", str(name), DTYPE_BYTES, hint=f"(in {where})")
