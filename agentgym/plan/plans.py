"""Plans: the per-GPU memory of a LoRA run and of a full fine-tune, with what they assume.

:func:`plan_lora` and :func:`plan_full_finetune` put the pieces of :mod:`.memory`
together for the worst pipeline stage and return a :class:`Plan`: one line item per kind
of memory, the peak of the two phases of the all-sync loop (rollout and training take
turns on the same GPUs), whether it fits, the headroom, warnings, and the assumptions
behind each number. :data:`ASSUMPTIONS` lists what holds whatever the settings (also in
``docs/plan.md``); a plan adds those that depend on its settings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from agentgym import ConfigError
from agentgym.generation import stage_ranges
from agentgym.plan.architecture import (
    Architecture,
    LoraSpec,
    ParameterCount,
    count_lora_parameters,
    count_parameters,
    layer_linears,
    trained_adapter_elems,
)
from agentgym.plan.engine_memory import EngineMemory, engine_memory, rollout_warnings
from agentgym.plan.memory import (
    GIB,
    LineItem,
    full_ft_state_items,
    layer_activation_elems,
    layer_saved_elems,
    loss_head_bytes,
    mask_bytes,
    overhead_items,
    phase_total,
    pipeline_bytes,
    rollout_items,
    stage_weight_bytes,
    weight_elems,
)
from agentgym.plan.specs import (
    DTYPE_BYTES,
    Hardware,
    ParallelSpec,
    RolloutSpec,
    TrainSpec,
    check_dtype,
)

#: what the memory model assumes, whatever the settings
ASSUMPTIONS: tuple[str, ...] = (
    "Peak = max(rollout phase, train phase): the all-sync loop alternates them on the same GPUs.",
    "The worst pipeline stage sets the peak; layers are split into contiguous, near-equal stages, "
    "the first stage also holds the embedding and the last the LM head and final norm.",
    "Attention, dense MLP and shared experts are split by TP (MLA's down-projections q_a/kv_a, "
    "norms and the router are replicated); routed experts are split by EP (no expert-TP); "
    "embedding and LM head are vocabulary-parallel over TP.",
    "Base weights: Linear weights inside decoder layers take the quantized dtype; embedding, "
    "LM head, norms and router stay bf16. Quantized GEMMs run natively (fp8), or dequantize "
    "one layer at a time (int4, counted in the layer working set).",
    "LoRA adapters: peft shapes, r*(in+out) per Linear and r*E*(in+out) per fused expert "
    "parameter; under TP the un-split factor is replicated.",
    "Optimizer: AdamW, two fp32 moments, plus an fp32 master copy when the trainable weights "
    "are not fp32; ZeRO stage 1 shards optimizer states, 2 also gradients, 3 also weights, "
    "over the data-parallel replicas of each weight (experts: TP*DP/EP replicas).",
    "Activations: full activation checkpointing; each stage keeps one layer-input tensor per "
    "layer per micro-batch in flight (1F1B: stage s has PP-s in flight), split over TP by "
    "sequence parallelism when plan.parallel.sequence_parallel is true (the trainer's mesh "
    "splits them so with distributed.activation_checkpointing); on top of that the larger of one recomputed layer (what autograd "
    "saves in it plus the gradients of its MLP or attention block; frozen Linears save "
    "nothing, adapted ones their input and rank-r intermediate; TP splits the heads, the "
    "MLP's intermediate and the routed experts' tokens, not the hidden-width values) and, on "
    "the last stage, the loss head (its logits and 5 fp32 copies: the cast, the "
    "log-sum-exp's exponentials, the entropy's three; measured by the 671B dry run). "
    "The head and the recomputed layer are not live at the same time.",
    "Pipeline (PyTorch's 1F1B schedule): a receive buffer per micro-batch of a run of the "
    "schedule for the previous stage's hidden states and one for the next stage's gradient "
    "of them, whole, held for the run; each stage but the last keeps its output per "
    "micro-batch in flight. A data-parallel rank runs its share of the update's sequences "
    "(rollout batch x plan.workload.conversations / algorithm.updates_per_batch), at least "
    "PP micro-batches, in runs of at most distributed.pp_window (0: one run; each run has "
    "its own bubble).",
    "Padded micro-batches carry a boolean T x T attention mask per micro-batch in flight "
    "(Hugging Face's SDPA path) and the layer being recomputed its additive copy.",
    "FSDP2 (the trainer's mesh) gathers the sharded base: under pipelining the whole stage "
    "stays gathered through the call (the schedule does not reshard between micro-batches); "
    "without, the embedding and head and two layers.",
    "Routed experts with LoRA run unmerged (x W + x A B per expert), as the trainer's "
    "expert-parallel path computes them; peft's fused-expert path (one process, no expert "
    "parallelism) materialises W + BA per layer, which at 671B scale would add about one "
    "layer of expert weights in bf16 per GPU (not counted).",
    "MoE routing is balanced: each EP rank processes top-k x its own tokens.",
    "Attention uses a fused kernel (FlashAttention/FlashMLA): no seq x seq score matrix, "
    "unless plan.flash_attention is false.",
    "Rollout KV cache for max_num_seqs sequences at max_model_len each (the worst case). "
    "MLA caches the compressed latent (kv_lora_rank + qk_rope_head_dim values per token per "
    "layer), replicated on every TP rank (vLLM's MLA); GQA caches K and V per KV head, split "
    "over TP down to one head per rank. Split over PP by layers.",
    "Sleep mode level 1 moves the rollout engine's weights to host memory and drops its KV "
    "cache during training; level 2 also drops the weights; with sleep mode off "
    "(rollout.engine_options.enable_sleep_mode: false) the engine keeps both on the GPU.",
    "The trainer's own weights and optimizer state stay on the GPU during rollout; gradients "
    "are freed after the optimizer step.",
    "MTP (next-token-prediction) modules and buffers such as rotary tables or the router's "
    "score-correction bias are not counted.",
)


@dataclass(frozen=True)
class Plan:
    """Per-GPU memory of the worst pipeline stage, line by line.

    Attributes:
        mode: ``"lora"`` or ``"full"``.
        items: the line items (GiB).
        gpu_mem_gib: the memory of one GPU.
        assumptions: what the numbers rest on.
        params: model parameter counts; lora_params: adapter parameters (0 for full).
        layout: the parallel layout used, as a dict.
        stage: the pipeline stage that sets the peak.
        warnings: what makes the layout unusable although the sum may fit (the engine
            outgrowing its ``gpu_memory_utilization``); a plan with warnings does not fit.
    """

    mode: str
    items: tuple[LineItem, ...]
    gpu_mem_gib: float
    assumptions: tuple[str, ...]
    params: ParameterCount
    lora_params: int
    layout: dict[str, Any]
    stage: int = 0
    warnings: tuple[str, ...] = field(default=())
    engine: EngineMemory | None = None

    def phase_gib(self, phase: str) -> float:
        """GiB live during ``phase`` ("train" or "rollout")."""
        return sum(i.gib for i in self.items if i.phase in ("both", phase))

    @property
    def train_gib(self) -> float:
        return self.phase_gib("train")

    @property
    def rollout_gib(self) -> float:
        return self.phase_gib("rollout")

    @property
    def total_gib(self) -> float:
        """The peak: the larger of the two phases."""
        return max(self.train_gib, self.rollout_gib)

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.gpu_mem_gib and not self.warnings

    @property
    def headroom_gib(self) -> float:
        return self.gpu_mem_gib - self.total_gib

    def item(self, name: str) -> float:
        """GiB of the line item ``name`` (0 when the plan has none)."""
        return sum(i.gib for i in self.items if i.name == name)

    def to_dict(self) -> dict[str, Any]:
        """The plan as plain JSON-ready data (what ``agentgym plan --json`` prints)."""
        return {
            "mode": self.mode,
            "items": [asdict(i) for i in self.items],
            "train_gib": self.train_gib,
            "rollout_gib": self.rollout_gib,
            "total_gib": self.total_gib,
            "gpu_mem_gib": self.gpu_mem_gib,
            "fits": self.fits,
            "headroom_gib": self.headroom_gib,
            "stage": self.stage,
            "layout": self.layout,
            "params": {"total": self.params.total, "activated": self.params.activated},
            "lora_params": self.lora_params,
            "warnings": list(self.warnings),
            "assumptions": list(self.assumptions),
            "engine": asdict(self.engine) | {"margin": self.engine.margin} if self.engine else None,
        }


@dataclass(frozen=True)
class _LoraRun:
    """The settings and byte sizes that every pipeline stage of a LoRA plan shares."""

    arch: Architecture
    lora: LoraSpec
    parallel: ParallelSpec
    base_dtype: str
    train: TrainSpec
    lin_b: float
    dense_b: float
    other_b: float
    act_b: float
    lora_b: float
    grad_b: float
    master_b: float
    tokens: int
    sp: int
    expert_replicas: int


def _lora_run(
    arch: Architecture,
    lora: LoraSpec,
    parallel: ParallelSpec,
    base_dtype: str,
    train: TrainSpec,
) -> _LoraRun:
    """Look up the byte sizes and shares of a LoRA run once for all its stages."""
    act_b, lora_b, grad_b = (
        DTYPE_BYTES[x] for x in (train.activation_dtype, train.lora_dtype, train.grad_dtype)
    )
    return _LoraRun(
        arch=arch,
        lora=lora,
        parallel=parallel,
        base_dtype=base_dtype,
        train=train,
        lin_b=DTYPE_BYTES[base_dtype],
        dense_b=DTYPE_BYTES["bf16" if _experts_only(parallel, base_dtype) else base_dtype],
        other_b=DTYPE_BYTES["fp32" if base_dtype == "fp32" else "bf16"],
        act_b=act_b,
        lora_b=lora_b,
        grad_b=grad_b,
        master_b=0.0 if train.lora_dtype == "fp32" else 4.0,
        tokens=train.micro_batch_size * train.seq_len,
        sp=parallel.tp if parallel.sequence_parallel else 1,
        expert_replicas=parallel.tp * parallel.dp // parallel.ep,
    )


def _experts_only(parallel: ParallelSpec, base_dtype: str) -> bool:
    """Whether a quantized base applies to the routed experts alone (the trainer's mesh)."""
    return parallel.experts_only_quantized and base_dtype not in ("fp32", "bf16", "fp16")


def _experts_and_other(
    run: _LoraRun, layers: range, *, first: bool, last: bool
) -> tuple[float, float]:
    """One GPU's frozen-base bytes of a stage's routed experts and of its non-Linear
    weights (norms, embedding, head): the parts FSDP2 shards differently from the dense
    Linear weights."""
    arch, tp, ep = run.arch, run.parallel.tp, run.parallel.ep
    experts = sum(
        weight_elems(lin, tp, ep) * run.lin_b
        for i in layers
        for lin in layer_linears(arch, i)
        if lin.group == "experts"
    )
    other = stage_weight_bytes(
        arch, layers, first=first, last=last, tp=tp, ep=ep, linear_bytes=0.0,
        other_bytes=run.other_b,
    )  # fmt: skip
    return experts, other


def _sharded_base(run: _LoraRun, layers: range, base: float, *, first: bool, last: bool) -> float:
    """One GPU's base bytes when FSDP2 shards the frozen base (``ParallelSpec.shard_base``):
    dense weights over ``dp``, routed experts over their replicas; a quantized base's
    Linear weights stay whole (FSDP2 leaves torchao's tensors alone)."""
    parallel, dp = run.parallel, run.parallel.dp
    experts, other = _experts_and_other(run, layers, first=first, last=last)
    dense = base - experts - other
    if _experts_only(parallel, run.base_dtype):  # quantized experts whole, bf16 rest sharded
        return (dense + other) / dp + experts
    if run.base_dtype not in ("fp32", "bf16", "fp16"):  # quantized Linear weights
        return dense + experts + other / dp
    return (dense + other) / dp + experts / run.expert_replicas


def _fsdp_managed(run: _LoraRun, layers: range, *, first: bool, last: bool) -> float:
    """Bytes (whole, before sharding) of the frozen base that FSDP2 shards on one GPU of
    a stage with ``layers`` (:func:`_sharded_base`'s split): what it gathers to compute."""
    arch, parallel = run.arch, run.parallel
    if not parallel.shard_base:
        return 0.0
    tp, ep, dp = parallel.tp, parallel.ep, parallel.dp
    whole = stage_weight_bytes(
        arch, layers, first=first, last=last, tp=tp, ep=ep, linear_bytes=run.lin_b,
        other_bytes=run.other_b, dense_linear_bytes=run.dense_b,
    )  # fmt: skip
    experts, other = _experts_and_other(run, layers, first=first, last=last)
    dense = whole - experts - other
    sharded = 0.0 if dp == 1 else other
    if dp > 1 and (_experts_only(parallel, run.base_dtype) or run.base_dtype in _PLAIN):
        sharded += dense
    if run.expert_replicas > 1 and run.base_dtype in _PLAIN:
        sharded += experts
    return sharded


_PLAIN = ("fp32", "bf16", "fp16")


def _gathered_layers(run: _LoraRun, s: int, layers: range) -> float:
    """Of :func:`_gathered_items`' bytes under pipelining, the decoder layers' (not the
    root's): free again while the last stage computes its loss, since FSDP2 reshards a
    layer after its forward until its first backward (the dry run's rank 47)."""
    pp = run.parallel.pp
    if pp == 1:
        return 0.0
    first, last = s == 0, s == pp - 1
    stage = _fsdp_managed(run, layers, first=first, last=last)
    return stage - _fsdp_managed(run, range(0), first=first, last=last)


def _gathered_items(run: _LoraRun, s: int, layers: range) -> list[LineItem]:
    """What FSDP2 gathers of the sharded base during the training call on stage ``s``:
    under pipelining the whole stage (PyTorch's schedule keeps every layer gathered from
    its first backward to the call's last, ``set_reshard_after_backward(False)``: measured
    by the 671B dry run, docs/plan.md); without, the root's (embedding, head: FSDP2 never
    reshards the root between forward and backward) and the two largest layers' (one
    computing, one prefetched)."""
    pp = run.parallel.pp
    first, last = s == 0, s == pp - 1
    if pp > 1:
        gathered = _fsdp_managed(run, layers, first=first, last=last)
        note = "the stage's sharded base, whole from its first backward to the call's end"
    else:
        root = _fsdp_managed(run, range(0), first=first, last=last)
        each = sorted(
            (_fsdp_managed(run, range(i, i + 1), first=False, last=False) for i in layers),
            reverse=True,
        )
        gathered = root + sum(each[:2])
        note = "embedding and head, and two layers (one computing, one prefetched)"
    if not gathered:
        return []
    return [LineItem("FSDP2 gathered base", gathered / GIB, "train", note)]


def _state_items(run: _LoraRun, s: int, layers: range) -> list[LineItem]:
    """The base weight, adapter, gradient and optimizer line items of stage ``s``."""
    arch, lora, parallel, train = run.arch, run.lora, run.parallel, run.train
    tp, ep, pp = parallel.tp, parallel.ep, parallel.pp
    base = stage_weight_bytes(
        arch,
        layers,
        first=s == 0,
        last=s == pp - 1,
        tp=tp,
        ep=ep,
        linear_bytes=run.lin_b,
        other_bytes=run.other_b,
        dense_linear_bytes=run.dense_b,
    )
    if parallel.shard_base:
        base = _sharded_base(run, layers, base, first=s == 0, last=s == pp - 1)
    # adapter elements (the critic's too), split into what is replicated over DP and
    # over expert-DP
    dense_lora, expert_lora = trained_adapter_elems(arch, lora, layers.start, layers.stop, tp, ep)
    lora_elems = dense_lora + expert_lora

    def zero(elems_dense: float, elems_expert: float, stage_min: int) -> float:
        if parallel.zero_stage >= stage_min:
            return elems_dense / parallel.dp + elems_expert / run.expert_replicas
        return elems_dense + elems_expert

    params_bytes = zero(dense_lora, expert_lora, 3) * run.lora_b
    grads_bytes = zero(dense_lora, expert_lora, 2) * run.grad_b
    opt_bytes = zero(dense_lora, expert_lora, 1) * (run.master_b + 8.0)
    return [
        LineItem("base weights", base / GIB, "both", _base_note(run)),
        LineItem(
            "LoRA params",
            params_bytes / GIB,
            "both",
            f"{lora_elems:,.0f} adapter values"
            + (" (policy + critic)" if lora.critic_r else "")
            + f", {train.lora_dtype}",
        ),
        LineItem("LoRA grads", grads_bytes / GIB, "train", train.grad_dtype),
        LineItem(
            "optimizer states",
            opt_bytes / GIB,
            "both",
            "fp32 master + 2 moments" if run.master_b else "2 fp32 moments",
        ),
    ]


def _base_note(run: _LoraRun) -> str:
    if _experts_only(run.parallel, run.base_dtype):
        return f"{run.base_dtype} routed experts (model.quantize), bf16 rest"
    return f"{run.base_dtype} Linear weights, bf16 rest"


def _activation_items(run: _LoraRun, s: int, layers: range) -> list[LineItem]:
    """The activation line items of stage ``s``: kept layer inputs, the stage outputs and
    receive buffers of the pipeline, the attention masks and the working set."""
    arch, lora, train = run.arch, run.lora, run.train
    tp, ep, pp = run.parallel.tp, run.parallel.ep, run.parallel.pp
    tokens, act_b, sp = run.tokens, run.act_b, run.sp
    last = s == pp - 1
    micro_batches = train.micro_batches(pp, run.parallel.dp)
    in_flight = min(pp - s, micro_batches)
    shape = {
        "seq_len": train.seq_len,
        "flash_attention": train.flash_attention,
        "act_bytes": act_b,
        "tp": tp,
    }
    per_token = max(layer_activation_elems(arch, i, lora, **shape) for i in layers)
    kept = len(layers) * arch.hidden_size / sp  # checkpointing: each layer's input
    if not train.activation_checkpointing:  # every layer keeps what autograd saves
        kept += sum(layer_saved_elems(arch, i, lora, **shape) for i in layers)
    boundary = in_flight * kept * tokens * act_b
    work = per_token * tokens * act_b
    if run.base_dtype == "int4":  # one layer dequantized to bf16
        work += 2.0 * max(
            sum(weight_elems(lin, tp, ep) for lin in layer_linears(arch, i)) for i in layers
        )
    loss = head = freed = 0.0
    if last:  # the layers' gathered base is resharded then (FSDP2: after their forward)
        head = loss_head_bytes(tokens=tokens, vocab=arch.vocab_size, tp=tp, act_bytes=act_b)
        freed = _gathered_layers(run, s, layers)
        loss = head - freed
    working = max(work, loss)
    layer = "one recomputed layer" if train.activation_checkpointing else "one layer's backward"
    which = layer
    if loss > work:
        which = "loss head (logits + 5 fp32 copies" + (
            f": {head / GIB:.2f} GiB, less the layers' gathered base, resharded then)"
            if freed
            else ")"
        )
    other = f"; the other: {min(work, loss) / GIB:.2f} GiB" if last else ""
    buffers, outputs = pipeline_bytes(
        stage=s, stages=pp, micro_batches=micro_batches, tokens=tokens,
        hidden=arch.hidden_size, act_bytes=act_b,
    )  # fmt: skip
    masks = mask_bytes(
        in_flight=in_flight, rows=train.micro_batch_size, seq_len=train.seq_len, act_bytes=act_b
    )
    items = [
        LineItem(
            "activations: layer inputs",
            boundary / GIB,
            "train",
            f"{len(layers)} layers x {in_flight} micro-batches in flight"
            + ("" if train.activation_checkpointing else ", all saved (no checkpointing)"),
        ),
        LineItem("activations: working set", working / GIB, "train", which + other),
        LineItem(
            "attention masks",
            masks / GIB,
            "train",
            f"padded micro-batches: {in_flight} boolean T x T + the recomputed layer's bias",
        ),
    ]
    if pp > 1:
        kinds = " and ".join(k for k, on in (("activations", s > 0), ("gradients", not last)) if on)
        items += [
            LineItem(
                "pipeline: stage outputs",
                outputs / GIB,
                "train",
                "last stage: none" if last else f"{in_flight} micro-batches in flight, whole",
            ),
            LineItem(
                "pipeline: receive buffers",
                buffers / GIB,
                "train",
                f"{micro_batches} micro-batches per schedule run x received {kinds}, whole",
            ),
        ]
    return items


def _lora_assumptions(train: TrainSpec, rollout: RolloutSpec | None) -> tuple[str, ...]:
    """:data:`ASSUMPTIONS` plus those that follow from a LoRA plan's settings."""
    assumptions = list(ASSUMPTIONS)
    if not train.activation_checkpointing:
        assumptions.append(
            "No activation checkpointing: every layer of a stage keeps what autograd saves "
            "in it (as counted for the recomputed layer, without its gradients) for each "
            "micro-batch in flight."
        )
    if rollout is not None and rollout.sleep_level == 0:
        assumptions.append(
            "Sleep mode is off: the rollout engine keeps its weights and KV cache during training."
        )
    return tuple(assumptions)


def plan_lora(
    arch: Architecture,
    *,
    lora: LoraSpec,
    parallel: ParallelSpec,
    base_dtype: str,
    train: TrainSpec,
    rollout: RolloutSpec | None,
    hardware: Hardware,
    overheads: bool = True,
    stage: int | None = None,
) -> Plan:
    """Per-GPU memory of LoRA training on a frozen (possibly quantized) base.

    Args:
        overheads: add the per-GPU constants (CUDA context, NCCL, fragmentation); off for
            a comparison with measured tensor bytes.
        stage: plan this pipeline stage rather than the worst one (a rank's dry run is
            compared with its own stage's lines).

    Raises:
        ConfigError: the layout does not match the GPU count or the model.
    """
    check_dtype("plan.base_weights", base_dtype)
    check_layout(arch, parallel, rollout, hardware)
    run = _lora_run(arch, lora, parallel, base_dtype, train)

    per_stage: list[tuple[float, int, list[LineItem]]] = []
    stages = stage_ranges(arch.num_layers, parallel.pp, key="pp")
    for s, layers in enumerate(stages):
        items = _state_items(run, s, layers) + _activation_items(run, s, layers)
        items += _gathered_items(run, s, layers)
        items += rollout_items(arch, lora, rollout, base_dtype)
        tensor = max(phase_total(items, "train"), phase_total(items, "rollout"))
        if overheads:
            items += overhead_items(tensor)
        peak = max(phase_total(items, "train"), phase_total(items, "rollout"))
        per_stage.append((peak, -s, items))
    if stage is None:
        _, neg_stage, items = max(per_stage, key=lambda t: (t[0], t[1]))
        stage = -neg_stage
    elif 0 <= stage < len(per_stage):
        items = per_stage[stage][2]
    else:
        raise ConfigError(f"stage {stage} is outside the {len(per_stage)} pipeline stages.")
    warnings = rollout_warnings(items, rollout, hardware)
    return Plan(
        mode="lora",
        items=tuple(items),
        gpu_mem_gib=hardware.gpu_mem_gib,
        assumptions=_lora_assumptions(train, rollout),
        params=count_parameters(arch),
        lora_params=count_lora_parameters(arch, lora),
        layout={
            "base_weights": base_dtype,
            **asdict(parallel),
            "rollout": asdict(rollout) if rollout else None,
            "gpus": hardware.gpus,
        },
        stage=stage,
        warnings=warnings,
        engine=engine_memory(items, rollout, hardware),
    )


def plan_full_finetune(
    arch: Architecture,
    *,
    train: TrainSpec,
    rollout: RolloutSpec | None,
    hardware: Hardware,
    overheads: bool = True,
) -> Plan:
    """Full fine-tuning for comparison: bf16 weights + bf16 grads + fp32 master + Adam
    moments (16 bytes per parameter), ZeRO-3 over all GPUs (no TP/PP), full activation
    checkpointing, one layer's weights gathered at a time, rollout engine at bf16."""
    counts = count_parameters(arch)
    tokens = train.micro_batch_size * train.seq_len
    act_b = DTYPE_BYTES[train.activation_dtype]
    items = full_ft_state_items(counts.total, hardware.gpus)
    biggest_layer = max(
        sum(lin.params for lin in layer_linears(arch, i)) for i in range(arch.num_layers)
    )
    boundary = arch.num_layers * tokens * arch.hidden_size * act_b
    per_token = max(
        layer_activation_elems(
            arch,
            i,
            None,
            seq_len=train.seq_len,
            flash_attention=train.flash_attention,
            act_bytes=act_b,
        )
        for i in range(arch.num_layers)
    )
    work = per_token * tokens * act_b
    loss = 3 * tokens * arch.vocab_size * 4.0
    which = "loss head (fp32 logits x3)" if loss > work else "one recomputed layer"
    items += [
        LineItem("ZeRO-3 gathered layer", biggest_layer * 2 / GIB, "train", "largest layer, bf16"),
        LineItem("activations: layer inputs", boundary / GIB, "train", f"{arch.num_layers} layers"),
        LineItem("activations: working set", max(work, loss) / GIB, "train", which),
    ]
    if rollout is not None:
        rollout = replace(rollout, weight_dtype="bf16")
    items += rollout_items(arch, None, rollout, "bf16")
    tensor = max(phase_total(items, "train"), phase_total(items, "rollout"))
    if overheads:
        items += overhead_items(tensor)
    assumptions = (
        "Full fine-tune: bf16 weights and gradients, fp32 master weights and two fp32 Adam "
        "moments (16 bytes per parameter), all sharded by ZeRO-3 over every GPU.",
        "Full fine-tune: no TP/PP; one layer's bf16 weights are gathered at a time.",
        "Full fine-tune: the rollout engine holds bf16 weights (they change every step).",
    )
    return Plan(
        mode="full",
        items=tuple(items),
        gpu_mem_gib=hardware.gpu_mem_gib,
        assumptions=assumptions,
        params=counts,
        lora_params=0,
        layout={
            "zero_stage": 3,
            "dp": hardware.gpus,
            "gpus": hardware.gpus,
            "rollout": asdict(rollout) if rollout else None,
        },
        warnings=rollout_warnings(items, rollout, hardware),
        engine=engine_memory(items, rollout, hardware),
    )


def check_layout(
    arch: Architecture, parallel: ParallelSpec, rollout: RolloutSpec | None, hardware: Hardware
) -> None:
    """Raise :class:`ConfigError` when a layout does not fit the GPU count or the model."""
    if parallel.gpus != hardware.gpus:
        raise ConfigError(
            f"plan.parallel tp*pp*dp = {parallel.tp}*{parallel.pp}*{parallel.dp} = "
            f"{parallel.gpus} GPUs, but plan.gpus is {hardware.gpus}; change plan.parallel.dp."
        )
    if arch.is_moe and arch.n_routed_experts % parallel.ep:
        raise ConfigError(
            f"plan.parallel.ep={parallel.ep} must divide n_routed_experts={arch.n_routed_experts}."
        )
    if parallel.tp > 1 and arch.num_attention_heads % parallel.tp:
        raise ConfigError(
            f"plan.parallel.tp={parallel.tp} must divide num_attention_heads={arch.num_attention_heads}."
        )
    if rollout is not None and rollout.engine == "vllm":
        if rollout.gpus != hardware.gpus:
            raise ConfigError(
                "rollout.engine_options: tensor_parallel_size*pipeline_parallel_size*"
                f"data_parallel_size = {rollout.tp}*{rollout.pp}*{rollout.dp} = {rollout.gpus} "
                f"GPUs, but plan.gpus is {hardware.gpus}; a colocated engine uses every GPU: "
                "change data_parallel_size."
            )
        if arch.is_moe and arch.n_routed_experts % rollout.ep:
            raise ConfigError(
                f"the rollout engine splits experts {rollout.ep} ways (tensor_parallel_size*"
                "data_parallel_size with enable_expert_parallel, else tensor_parallel_size), "
                f"which must divide n_routed_experts={arch.n_routed_experts}; change "
                "rollout.engine_options."
            )
