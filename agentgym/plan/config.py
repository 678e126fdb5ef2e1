"""The planner's config: the ``plan:`` section, and a trainer config read as planner inputs.

``agentgym plan`` and ``agentgym train`` read the same file: the trainer's sections and
a ``plan:`` section (:class:`PlanSettings`, the planner's own). The trainer keeps that
section as written and never reads it; :class:`~agentgym.plan.PlanConfig` is the trainer
config with the section typed and checked, and :func:`plan_settings` types it for a
plain :class:`~agentgym.trainers.TrainConfig`. The planner takes the trainer's own
sections where they hold what it needs, and ``plan:`` for the rest:

* ``model.architecture``: the model's ``config.json`` fields (or ``config.json`` in
  ``model.path`` when that directory exists), so nothing is downloaded;
* ``lora``: ``r``, ``alpha``, ``target_modules``, ``target_experts``;
* ``algorithm.micro_batch_size``: sequences per forward/backward pass;
* ``rollout.engine`` and ``rollout.engine_options`` (vLLM's names): the engine's layout,
  ``max_num_seqs``, ``max_model_len``, ``gpu_memory_utilization``, sleep mode and the KV
  cache dtype;
* ``plan``: GPU count and memory, the training layout (``plan.parallel``: tp, ep, pp,
  dp, ZeRO stage), the base weights' quantization, the sequence length and the
  activation settings.

``distributed``: when it names a device mesh (``dp_shard``, ``tp``, ``ep``, ``pp``: the
layout the trainer runs, docs/distributed.md), its sizes are the layout planned, in the
planner's terms (:func:`trainer_layout`); ``plan.parallel`` then only adds the
planner's own knobs (``zero_stage``, ``sequence_parallel``), and sizes it names must agree.

:func:`plan_inputs` turns a loaded config into :class:`PlanInputs`; :func:`plan_both`
plans them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgym import ConfigError, UnknownNameError, config_check, config_from_dict
from agentgym.plan.architecture import Architecture, LoraSpec
from agentgym.plan.hardware import Cluster, gpu_spec
from agentgym.plan.plans import Plan, plan_full_finetune, plan_lora
from agentgym.plan.settings import Efficiency, SearchSettings, WorkloadSettings
from agentgym.plan.specs import (
    Hardware,
    ParallelSpec,
    RolloutSpec,
    TrainSpec,
    check_dtype,
)
from agentgym.plan.timing import StepSpec
from agentgym.plan.workload import Workload

if TYPE_CHECKING:
    from agentgym.trainers import ModelConfig, RolloutConfig, TrainConfig


@dataclass
class PlanSettings:
    """The ``plan:`` section: what only ``agentgym plan`` needs. The trainer ignores it.

    The defaults mean "not planned" (``gpus: 0``); ``agentgym plan`` asks for the section.

    Attributes:
        gpus: GPUs of the run (0: no plan). ``--gpus`` rescales the data-parallel sizes.
        gpu_mem_gib: memory of one GPU, GiB.
        parallel: the training layout (:class:`ParallelSpec`: ``tp``, ``ep``, ``pp``,
            ``dp``, ``zero_stage``, ``sequence_parallel``); ``tp * pp * dp`` must equal
            ``gpus``.
        base_weights: dtype of the frozen base's Linear weights: ``bf16``, ``fp16``,
            ``fp32``, ``fp8`` (128x128 block scales, as DeepSeek-V3 ships) or ``int4``
            (group-128 scales and zeros).
        seq_len: tokens of one training sequence (one conversation).
        activation_checkpointing: full activation checkpointing (the only mode a
            hand-written layout is planned with; ``--search`` also tries it off).
        flash_attention: a fused attention kernel (no seq x seq score matrix).
        activation_dtype / lora_dtype / grad_dtype: dtypes of activations, the adapter's
            weights and its gradients.
        gpu: the accelerator (``h100``, ``h800``, ``h200``, ``h20``, ``a100``): its peak
            FLOP/s and bandwidths for the time model.
        gpus_per_node: GPUs joined by NVLink in one node.
        host_mem_gib: host memory of one node, GiB (``null``: not checked); the engine's
            pinned weights while it sleeps (level 1) are held against it.
        network_gbit: inter-node bandwidth per GPU, Gbit/s (``null``: the GPU's usual NIC).
        offload_train_state: the trainer's state goes to the host during rollout.
        workload: what a step generates (:class:`WorkloadSettings`).
        efficiency: the time model's efficiency assumptions (:class:`Efficiency`).
        search: the space ``--search`` enumerates (:class:`SearchSettings`).
    """

    gpus: int = 0
    gpu_mem_gib: float = 80.0
    parallel: ParallelSpec = field(default_factory=ParallelSpec)
    base_weights: str = "bf16"
    seq_len: int = 4096
    activation_checkpointing: bool = True
    flash_attention: bool = True
    activation_dtype: str = "bf16"
    lora_dtype: str = "bf16"
    grad_dtype: str = "fp32"
    gpu: str = "h100"
    gpus_per_node: int = 8
    host_mem_gib: float | None = None
    network_gbit: float | None = None
    offload_train_state: bool = False
    workload: WorkloadSettings = field(default_factory=WorkloadSettings)
    efficiency: Efficiency = field(default_factory=Efficiency)
    search: SearchSettings = field(default_factory=SearchSettings)

    def __post_init__(self) -> None:
        config_check(self.gpus >= 0, f"plan.gpus must be >= 0 (0: no plan), got {self.gpus}.")
        config_check(self.gpu_mem_gib > 0, f"plan.gpu_mem_gib must be > 0, got {self.gpu_mem_gib}.")
        check_dtype("plan.base_weights", self.base_weights)
        config_check(
            self.activation_checkpointing,
            "plan.activation_checkpointing: a hand-written layout is planned with full "
            "activation checkpointing only; set it to true (agentgym plan --search also "
            "tries layouts without it).",
        )
        gpu_spec(self.gpu)  # "did you mean" for an unknown GPU
        config_check(self.gpus_per_node >= 1, "plan.gpus_per_node must be >= 1.")
        self.train_spec(micro_batch_size=1)  # checks seq_len and the dtypes

    @property
    def planned(self) -> bool:
        """Whether the section describes a run (``gpus`` set)."""
        return self.gpus > 0

    def train_spec(
        self, micro_batch_size: int, update_sequences: int = 0, pipeline_window: int = 0
    ) -> TrainSpec:
        """The training step the planner sizes, with the trainer's micro-batch size, the
        sequences of one optimizer step and its pipeline window."""
        return TrainSpec(
            micro_batch_size=micro_batch_size,
            update_sequences=update_sequences,
            pipeline_window=pipeline_window,
            seq_len=self.seq_len,
            activation_checkpointing=self.activation_checkpointing,
            flash_attention=self.flash_attention,
            activation_dtype=self.activation_dtype,
            lora_dtype=self.lora_dtype,
            grad_dtype=self.grad_dtype,
        )


def plan_settings(cfg: TrainConfig) -> PlanSettings:
    """The ``plan:`` section of ``cfg``, typed: a :class:`~agentgym.plan.PlanConfig`'s as
    it is, a trainer config's (a mapping, as written) checked now.

    Raises:
        ConfigError: a bad value; :class:`~agentgym.UnknownNameError` for an unknown key.
    """
    section = cfg.plan
    if isinstance(section, PlanSettings):
        return section
    return config_from_dict(PlanSettings, dict(section or {}), "plan")


NOT_PLANNED = (
    "this config has no plan: section (plan.gpus is 0), so there is nothing to plan. Add "
    "the GPUs and the training layout, for example\n"
    "  plan:\n"
    "    gpus: 8\n"
    "    gpu_mem_gib: 80\n"
    "    parallel: {tp: 1, ep: 1, pp: 1, dp: 8}\n"
    "or pass them as overrides: plan.gpus=8 plan.parallel.dp=8. docs/plan.md lists every key."
)


@dataclass(frozen=True)
class PlanInputs:
    """Everything one planning run reads, typed and checked.

    Attributes:
        arch: the model's shape.
        lora: the adapter.
        parallel: the training layout.
        base_dtype: the frozen base's Linear weight dtype.
        train: the training step.
        rollout: the colocated vLLM engine (``None``: nothing of the engine is counted on
            these GPUs; ``notes`` says why).
        hardware: the GPUs.
        notes: assumptions that follow from this config, added to the LoRA plan's.
    """

    arch: Architecture
    lora: LoraSpec
    parallel: ParallelSpec
    base_dtype: str
    train: TrainSpec
    rollout: RolloutSpec | None
    hardware: Hardware
    notes: tuple[str, ...] = ()
    timing: TimingInputs | None = None


@dataclass(frozen=True)
class TimingInputs:
    """What the time model and the search read beyond the memory plan's inputs.

    Attributes:
        cluster: the GPU, nodes and fabric.
        workload: one step's generation and training work.
        efficiency: the efficiency assumptions (``plan.efficiency``).
        search: the search space (``plan.search``).
        cuda_graphs: the engine decodes with CUDA graphs (vLLM's ``enforce_eager`` off).
        offload_train_state: ``plan.offload_train_state``.
        generation_rounds: ``plan.workload.generation_rounds``.
        engine: ``rollout.engine``.
        own_layout: ``parallel`` and ``rollout`` are the config's (not stand-ins for a
            search on another GPU count).
    """

    cluster: Cluster
    workload: Workload
    efficiency: Efficiency
    search: SearchSettings
    cuda_graphs: bool = True
    offload_train_state: bool = False
    generation_rounds: float = 1.0
    engine: str = "vllm"
    own_layout: bool = True


def timing_inputs(cfg: TrainConfig, gpus: int) -> TimingInputs:
    """The time model's inputs from the trainer's sections and ``plan:``."""
    from agentgym.trainers.algorithm import LOSSES

    settings = plan_settings(cfg)
    ws = settings.workload
    gpu = gpu_spec(settings.gpu)
    cluster = Cluster(
        gpu,
        gpus,
        settings.gpus_per_node,
        settings.network_gbit if settings.network_gbit is not None else gpu.network_gbit,
    )
    cap = cfg.rollout.max_tokens
    response = ws.response_tokens if ws.response_tokens is not None else max(1, cap // 3)
    if response > cap:
        raise ConfigError(
            f"plan.workload.response_tokens ({response}) is above rollout.max_tokens ({cap}); "
            "lower it or raise the cap."
        )
    algo = cfg.algorithm
    needs_ref = algo.kl_coef > 0 or LOSSES[algo.loss].needs_reference
    critic = algo.uses_critic  # its valuation is one more forward pass over the batch
    workload = Workload(
        episodes=cfg.rollout.batch_tasks * cfg.rollout.group_size,
        group_size=cfg.rollout.group_size,
        prompt_tokens=ws.prompt_tokens,
        response_tokens=response,
        max_response_tokens=cap,
        distribution=ws.length_distribution,
        conversations=ws.conversations,
        env_seconds=ws.env_seconds,
        share_prompts=algo.share_prompts,
        logprob_passes=int(algo.updates_per_batch > 1) + int(needs_ref) + int(critic),
        updates=algo.updates_per_batch,
        critic_passes=cfg.critic.updates_per_batch if critic else 0,
    )
    graphs = cfg.rollout.engine == "vllm" and not cfg.rollout.engine_settings.enforce_eager
    return TimingInputs(
        cluster=cluster,
        workload=workload,
        efficiency=settings.efficiency,
        search=settings.search,
        cuda_graphs=graphs,
        offload_train_state=settings.offload_train_state,
        generation_rounds=ws.generation_rounds,
        engine=cfg.rollout.engine,
    )


def step_spec(inputs: PlanInputs) -> StepSpec:
    """The LoRA layout of ``inputs`` as the time model's :class:`StepSpec`.

    Without a colocated vLLM engine (``rollout.engine: hf``), generation is modelled as
    an engine on the trainer's own layout without CUDA graphs.

    Raises:
        ConfigError: the inputs carry no timing part (built without a config).
    """
    t = inputs.timing
    if t is None:
        raise ConfigError("these planner inputs have no timing part; build them with plan_inputs.")
    p = inputs.parallel
    rollout = inputs.rollout or RolloutSpec(
        engine="vllm",
        tp=p.tp,
        pp=p.pp,
        dp=p.dp,
        ep=p.ep,
        max_num_seqs=max(1, -(-t.workload.episodes // p.dp)),
        max_model_len=inputs.train.seq_len,
        sleep_level=0,
    )
    return StepSpec(
        arch=inputs.arch,
        mode="lora",
        lora=inputs.lora,
        parallel=p,
        micro_batch_size=inputs.train.micro_batch_size,
        activation_checkpointing=inputs.train.activation_checkpointing,
        pipeline_window=inputs.train.pipeline_window,
        base_dtype=inputs.base_dtype,
        rollout=rollout,
        workload=t.workload,
        cluster=t.cluster,
        eff=t.efficiency,
        generation_rounds=t.generation_rounds,
        cuda_graphs=t.cuda_graphs and inputs.rollout is not None,
        offload_train_state=t.offload_train_state,
    )


def trainer_layout(cfg: TrainConfig, spec: ParallelSpec) -> ParallelSpec:
    """The training layout to plan: the trainer's ``distributed`` mesh in the planner's
    terms when it names one (``ep`` counts the GPUs the experts are split over, ``dp``
    the data-parallel ranks), else ``plan.parallel``; sizes named in both must agree."""
    from agentgym.trainers import Layout

    layout = Layout.from_config(cfg.distributed)
    if layout.is_default:
        return spec
    sizes = layout.planner_sizes()
    given = {k: getattr(spec, k) for k in sizes}
    if any(v != 1 for v in given.values()) and given != sizes:
        raise ConfigError(
            f"plan.parallel {given} is not the trainer's layout: distributed "
            f"{layout.describe()} is {sizes} in the planner's terms. Remove plan.parallel's "
            "sizes (the planner reads distributed), or make them agree."
        )
    return replace(
        spec,
        **sizes,
        shard_base=cfg.distributed.strategy == "fsdp2",
        experts_only_quantized=cfg.model.quantize != "none",
    )


def _update_sequences(cfg: TrainConfig) -> int:
    """Sequences one optimizer step trains on: the step's episodes (``rollout.batch_tasks
    x group_size``) times their conversations (``plan.workload.conversations``), over
    ``algorithm.updates_per_batch``."""
    episodes = cfg.rollout.batch_tasks * cfg.rollout.group_size
    sequences = episodes * plan_settings(cfg).workload.conversations
    return -(-sequences // cfg.algorithm.updates_per_batch)


def plan_inputs(
    cfg: TrainConfig,
    *,
    gpus: int | None = None,
    gpu_mem_gib: float | None = None,
    for_search: bool = False,
) -> PlanInputs:
    """Read a trainer config as the planner's inputs.

    Args:
        cfg: a loaded trainer config (``agentgym.load_config(TrainConfig, path)``).
        gpus: replace ``plan.gpus``; the data-parallel sizes (``plan.parallel.dp`` and
            the engine's ``data_parallel_size``) are rescaled to keep the other
            dimensions.
        gpu_mem_gib: replace ``plan.gpu_mem_gib``.
        for_search: the inputs seed a layout search: when the config's layouts cannot
            be rescaled to ``gpus``, plain data parallelism stands in for them (the
            search replaces them anyway) instead of an error.

    Raises:
        ConfigError: no ``plan:`` section, no model shape, or a layout that does not fit
            the GPU count; the message names the key to change.
    """
    settings = plan_settings(cfg)
    if not settings.planned:
        raise ConfigError(NOT_PLANNED)
    fields = model_fields(cfg.model)
    arch = Architecture.from_config(fields)
    rescale = gpus is not None and gpus != settings.gpus
    hardware = Hardware(
        gpus=gpus if gpus is not None else settings.gpus,
        gpu_mem_gib=gpu_mem_gib if gpu_mem_gib is not None else settings.gpu_mem_gib,
        gpus_per_node=settings.gpus_per_node,
        host_mem_gib=settings.host_mem_gib,
    )
    parallel = trainer_layout(cfg, settings.parallel)
    try:
        if rescale:
            dp = _rescale("plan.parallel tp*pp", parallel.tp * parallel.pp, hardware.gpus)
            parallel = replace(parallel, dp=dp)
        rollout, notes = rollout_spec(cfg.rollout, fields, gpus=hardware.gpus if rescale else None)
        own_layout = True
    except ConfigError:
        if not for_search:
            raise
        parallel = ParallelSpec(dp=hardware.gpus, zero_stage=parallel.zero_stage)
        rollout, notes = rollout_spec(cfg.rollout, fields, gpus=None)
        if rollout is not None:
            rollout = replace(rollout, tp=1, pp=1, dp=hardware.gpus, ep=1)
        notes += (
            f"the config's layouts do not divide {hardware.gpus} GPUs; searched from scratch.",
        )
        own_layout = False
    if not cfg.lora.enabled:
        notes += (
            "lora.enabled is false: the trainer would fine-tune every weight (the full "
            "fine-tune column); the LoRA column is the adapter the lora section describes.",
        )
    if cfg.algorithm.uses_critic and not cfg.critic.share_base:
        notes += (
            "critic.share_base is false: the separate critic model's weights, states and "
            "passes are not in these figures (only a critic adapter on the base is modelled).",
        )
    elif cfg.algorithm.uses_critic and cfg.critic.target_modules is not None:
        notes += (
            "the critic adapter is sized on the policy adapter's target modules, not "
            "critic.target_modules.",
        )
    targets = cfg.lora.target_modules
    return PlanInputs(
        arch=arch,
        lora=LoraSpec(
            r=cfg.lora.r,
            alpha=cfg.lora.alpha,
            target_modules=tuple(targets) if targets is not None else None,
            target_experts=cfg.lora.target_experts,
            critic_r=cfg.critic.r if cfg.algorithm.uses_critic and cfg.critic.share_base else 0,
        ),
        parallel=parallel,
        base_dtype=settings.base_weights,
        train=settings.train_spec(
            cfg.algorithm.micro_batch_size, _update_sequences(cfg), cfg.distributed.pp_window
        ),
        rollout=rollout,
        hardware=hardware,
        notes=notes,
        timing=replace(timing_inputs(cfg, hardware.gpus), own_layout=own_layout),
    )


def model_fields(model: ModelConfig) -> dict[str, Any]:
    """The model's ``config.json`` fields: ``model.architecture``, else ``model.path``'s file.

    Raises:
        ConfigError: neither is there.
    """
    if model.architecture:
        return dict(model.architecture)
    if model.path:
        path = Path(model.path) / "config.json"
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise ConfigError(f"{path}: not valid JSON ({e}).") from e
            if isinstance(data, dict):
                return data
    raise ConfigError(
        "the planner needs the model's shape: set model.architecture to the fields of its "
        "config.json (hidden_size, num_hidden_layers, vocab_size, num_attention_heads, "
        "intermediate_size, and the MoE/MLA fields if any), or point model.path at a "
        "directory that holds config.json."
    )


#: dtype names of vLLM and config.json -> the planner's
_DTYPES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
}


def rollout_spec(
    rollout: RolloutConfig, fields: dict[str, Any], *, gpus: int | None = None
) -> tuple[RolloutSpec | None, tuple[str, ...]]:
    """The engine the planner counts, from ``rollout.engine`` and its options.

    vLLM's layout maps as follows: ``tp``/``pp``/``dp`` are ``tensor_parallel_size``,
    ``pipeline_parallel_size`` and ``data_parallel_size``; with ``enable_expert_parallel``
    routed experts are split over ``tp * dp`` GPUs (vLLM's expert-parallel group), without
    it every expert is sliced over TP, the same bytes per GPU as ``ep = tp``. Sleep mode
    (``enable_sleep_mode``, on by default when colocated) frees the engine's memory at
    ``sleep_level`` while the trainer runs; off, it keeps it (level 0). ``max_model_len``
    defaults to the model's ``max_position_embeddings``; ``kv_cache_dtype: auto`` is the
    checkpoint's 16-bit dtype.

    Args:
        gpus: rescale ``data_parallel_size`` to this many GPUs (``--gpus``). The
            expert-parallel group keeps the config's size (more engine replicas of the
            same shape, as the planner has always rescaled); a single vLLM engine
            launched with the larger ``data_parallel_size`` would spread its experts
            over ``tp * dp`` GPUs instead, which needs less memory per GPU.

    Returns:
        The spec (``None`` when nothing of the engine sits on the trained GPUs) and the
        notes that say why.
    """
    if rollout.engine != "vllm":
        return None, (
            f"rollout.engine is {rollout.engine!r}: generation runs on the trainer's own "
            "weights; its KV cache and workspace are not counted.",
        )
    opts = rollout.engine_settings
    if not opts.colocated:
        return None, (
            "rollout.engine_options.colocated is false: the engine runs on other GPUs and is "
            "not counted here.",
        )
    where = "rollout.engine_options"
    tp, pp, dp = opts.tensor_parallel_size, opts.pipeline_parallel_size, opts.data_parallel_size
    ep = tp * dp if opts.enable_expert_parallel else tp  # before --gpus: see the docstring
    if gpus is not None:
        dp = _rescale(f"{where} tensor_parallel_size*pipeline_parallel_size", tp * pp, gpus)
    if opts.max_num_seqs is None:
        raise ConfigError(
            f"{where}.max_num_seqs is not set: the planner sizes the KV cache for max_num_seqs "
            "sequences of max_model_len tokens; set it (vLLM's own default depends on its "
            "version and the GPU)."
        )
    max_len = opts.max_model_len or fields.get("max_position_embeddings")
    if not isinstance(max_len, int) or max_len < 1:
        raise ConfigError(
            f"{where}.max_model_len is not set and the model gives no "
            "max_position_embeddings; set max_model_len."
        )
    sleeps = opts.enable_sleep_mode if opts.enable_sleep_mode is not None else opts.colocated
    spec = RolloutSpec(
        engine="vllm",
        tp=tp,
        pp=pp,
        dp=dp,
        ep=ep,
        max_num_seqs=opts.max_num_seqs,
        max_model_len=max_len,
        gpu_memory_utilization=opts.gpu_memory_utilization,
        sleep_level=opts.sleep_level if sleeps else 0,
        kv_cache_dtype=_kv_dtype(opts.kv_cache_dtype, opts.dtype, fields),
    )
    return spec, ()


def _kv_dtype(kv_cache_dtype: str, dtype: str, fields: dict[str, Any]) -> str:
    """vLLM's ``kv_cache_dtype`` (``auto``: the model's dtype) as a planner dtype."""
    if kv_cache_dtype.startswith("fp8"):
        return "fp8"
    if kv_cache_dtype != "auto":
        name = kv_cache_dtype
    elif dtype != "auto":
        name = dtype
    else:
        name = str(fields.get("torch_dtype") or fields.get("dtype") or "bfloat16")
        if name in ("float32", "float"):
            name = "bfloat16"  # vLLM serves fp32 checkpoints in 16 bits
    if name not in _DTYPES:
        raise UnknownNameError(
            "rollout.engine_options.kv_cache_dtype", name, ("auto", "fp8", *_DTYPES)
        )
    return _DTYPES[name]


def _rescale(what: str, per_replica: int, gpus: int) -> int:
    if gpus % per_replica:
        raise ConfigError(
            f"--gpus {gpus} is not a multiple of {what} = {per_replica}; pick a multiple or "
            "change the layout in the config."
        )
    return gpus // per_replica


def plan_both(inputs: PlanInputs) -> tuple[Plan, Plan]:
    """The LoRA plan of the inputs and the full fine-tune of the same model."""
    lora = plan_lora(
        inputs.arch,
        lora=inputs.lora,
        parallel=inputs.parallel,
        base_dtype=inputs.base_dtype,
        train=inputs.train,
        rollout=inputs.rollout,
        hardware=inputs.hardware,
    )
    full = plan_full_finetune(
        inputs.arch, train=inputs.train, rollout=inputs.rollout, hardware=inputs.hardware
    )
    if inputs.notes:
        lora = replace(lora, assumptions=lora.assumptions + inputs.notes)
    return lora, full
