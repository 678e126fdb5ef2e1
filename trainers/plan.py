"""Memory planner: will a LoRA (or full) fine-tune of this model fit on these GPUs?

Pure arithmetic on an architecture description; nothing here touches torch or a GPU.

* :class:`Architecture` reads a Hugging Face config (a dict or a ``PretrainedConfig``):
  Qwen2/Llama-style dense models with grouped-query attention, and DeepSeek-V3-style MoE
  models with multi-head latent attention (MLA), dense first layers, routed experts and
  shared experts. :func:`count_parameters` gives the total and the per-token activated
  parameter count from the layer shapes alone (nothing is hard-coded per model).
* :func:`count_lora_parameters` counts a LoRA adapter the way peft builds it: ``r * (in +
  out)`` per adapted Linear, and ``r * E * (in + out)`` per fused ``[E, out, in]`` expert
  parameter (one rank-``r`` adapter per expert).
* :func:`plan_lora` and :func:`plan_full_finetune` give the per-GPU memory of the worst
  pipeline stage as a :class:`Plan`: one line item per kind of memory, the peak of the
  two phases of the all-sync loop (rollout and training take turns on the same GPUs),
  whether it fits, the headroom and the assumptions behind each number.

The assumptions are listed in :data:`ASSUMPTIONS` (and in ``docs/plan.md``); each plan
adds the ones that depend on its settings. Numbers are GiB (2**30 bytes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from agentgym import ConfigError, UnknownNameError

GIB = float(2**30)

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

#: explicit per-GPU constants (GiB) for what is not a tensor the planner can size
CUDA_CONTEXT_GIB = 0.75  # CUDA context, kernels, cuBLAS workspaces (one process per GPU)
COMM_BUFFERS_GIB = 1.0  # NCCL communicator buffers for TP/EP/PP/DP groups
ROLLOUT_WORKSPACE_GIB = 2.0  # vLLM forward activations, sampler, CUDA graphs
FRAGMENTATION = 0.10  # caching-allocator reserve, as a fraction of the tensor bytes

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
    "sequence parallelism; on top of that the larger of one recomputed layer (what autograd "
    "saves in it plus the gradients of its MLP or attention block; frozen Linears save "
    "nothing, adapted ones their input and rank-r intermediate) and, on the last stage, the "
    "loss head's fp32 logits (3 copies: logits, log-softmax, gradient). The head and the "
    "recomputed layer are not live at the same time.",
    "Routed experts with LoRA run unmerged (x W + x A B per expert, a LoRA-aware grouped "
    "GEMM); peft's fused-expert path materialises W + BA per layer, which at 671B scale "
    "would add about one layer of expert weights in bf16 per GPU (not counted).",
    "MoE routing is balanced: each EP rank processes top-k x its own tokens.",
    "Attention uses a fused kernel (FlashAttention/FlashMLA): no seq x seq score matrix, "
    "unless train.flash_attention is false.",
    "Rollout KV cache for max_num_seqs sequences at max_model_len each (the worst case). "
    "MLA caches the compressed latent (kv_lora_rank + qk_rope_head_dim values per token per "
    "layer), replicated on every TP rank (vLLM's MLA); GQA caches K and V per KV head, split "
    "over TP down to one head per rank. Split over PP by layers.",
    "Sleep mode level 1 moves the rollout engine's weights to host memory and drops its KV "
    "cache during training; level 0 (off) keeps both on the GPU; level 2 drops the weights.",
    "The trainer's own weights and optimizer state stay on the GPU during rollout; gradients "
    "are freed after the optimizer step.",
    "MTP (next-token-prediction) modules and buffers such as rotary tables or the router's "
    "score-correction bias are not counted.",
)


# --------------------------------------------------------------------------- architecture


@dataclass(frozen=True)
class Architecture:
    """The shape of a decoder-only transformer, as far as memory is concerned.

    Build it with :meth:`from_config` from a Hugging Face config. Attention is ``"gqa"``
    (separate q/k/v/o projections) or ``"mla"`` (DeepSeek's latent attention, recognised by
    ``kv_lora_rank``); the MLP is dense unless ``n_routed_experts`` is set.
    """

    hidden_size: int
    num_layers: int
    vocab_size: int
    num_attention_heads: int
    intermediate_size: int
    tie_word_embeddings: bool = False
    attention: Literal["gqa", "mla"] = "gqa"
    num_key_value_heads: int = 0
    head_dim: int = 0
    qkv_bias: bool = False
    o_bias: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    n_routed_experts: int = 0
    n_shared_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    first_k_dense_replace: int = 0
    moe_layer_freq: int = 1
    model_type: str = ""

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | Any) -> Architecture:
        """Read a Hugging Face config dict or ``PretrainedConfig``.

        Raises:
            ConfigError: a required field is missing or not a positive integer.
        """

        def get(name: str, default: Any = None) -> Any:
            if isinstance(config, Mapping):
                return config.get(name, default)
            return getattr(config, name, default)

        def need(name: str) -> int:
            value = get(name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(
                    f"model architecture field {name!r} must be a positive integer, got "
                    f"{value!r}; copy it from the model's config.json."
                )
            return value

        hidden, heads = need("hidden_size"), need("num_attention_heads")
        model_type = str(get("model_type", "") or "")
        common = dict(
            hidden_size=hidden,
            num_layers=need("num_hidden_layers"),
            vocab_size=need("vocab_size"),
            num_attention_heads=heads,
            intermediate_size=need("intermediate_size"),
            tie_word_embeddings=bool(get("tie_word_embeddings", False)),
            model_type=model_type,
        )
        if get("kv_lora_rank"):
            q_lora = get("q_lora_rank")
            arch = cls(
                **common,
                attention="mla",
                q_lora_rank=int(q_lora) if q_lora else None,
                kv_lora_rank=need("kv_lora_rank"),
                qk_nope_head_dim=need("qk_nope_head_dim"),
                qk_rope_head_dim=need("qk_rope_head_dim"),
                v_head_dim=need("v_head_dim"),
            )
        else:
            bias = bool(get("attention_bias", False))
            arch = cls(
                **common,
                attention="gqa",
                num_key_value_heads=int(get("num_key_value_heads") or heads),
                head_dim=int(get("head_dim") or hidden // heads),
                qkv_bias=bias or model_type == "qwen2",
                o_bias=bias,
            )
        if get("n_routed_experts"):
            arch = replace(
                arch,
                n_routed_experts=need("n_routed_experts"),
                n_shared_experts=int(get("n_shared_experts") or 0),
                num_experts_per_tok=need("num_experts_per_tok"),
                moe_intermediate_size=need("moe_intermediate_size"),
                first_k_dense_replace=int(get("first_k_dense_replace") or 0),
                moe_layer_freq=int(get("moe_layer_freq") or 1),
            )
        return arch

    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    def is_moe_layer(self, index: int) -> bool:
        """DeepSeek's rule: MoE from layer ``first_k_dense_replace`` on, every ``freq``-th."""
        return (
            self.is_moe and index >= self.first_k_dense_replace and index % self.moe_layer_freq == 0
        )

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


Split = Literal["col", "row", "rep"]


@dataclass(frozen=True)
class Linear:
    """One weight matrix of a layer (``count`` > 1: a fused ``[count, out, in]`` expert tensor).

    ``split`` says how tensor parallelism cuts it: ``col`` splits the outputs, ``row`` the
    inputs, ``rep`` replicates it. ``group`` is attention / mlp / shared / experts.
    ``per_token`` is how many times one token passes through it (top-k for routed experts).
    """

    name: str
    group: str
    in_features: int
    out_features: int
    split: Split
    count: int = 1
    bias: bool = False
    per_token: int = 1

    @property
    def params(self) -> int:
        return self.count * (self.in_features * self.out_features + self.out_features * self.bias)


def attention_linears(arch: Architecture) -> list[Linear]:
    """The projections of one attention block, named as in transformers."""
    h, nh = arch.hidden_size, arch.num_attention_heads
    if arch.attention == "gqa":
        hd, nkv = arch.head_dim, arch.num_key_value_heads
        return [
            Linear("q_proj", "attention", h, nh * hd, "col", bias=arch.qkv_bias),
            Linear("k_proj", "attention", h, nkv * hd, "col", bias=arch.qkv_bias),
            Linear("v_proj", "attention", h, nkv * hd, "col", bias=arch.qkv_bias),
            Linear("o_proj", "attention", nh * hd, h, "row", bias=arch.o_bias),
        ]
    out: list[Linear] = []
    if arch.q_lora_rank:
        out.append(Linear("q_a_proj", "attention", h, arch.q_lora_rank, "rep"))
        out.append(Linear("q_b_proj", "attention", arch.q_lora_rank, nh * arch.qk_head_dim, "col"))
    else:
        out.append(Linear("q_proj", "attention", h, nh * arch.qk_head_dim, "col"))
    kv_a_out = arch.kv_lora_rank + arch.qk_rope_head_dim
    out.append(Linear("kv_a_proj_with_mqa", "attention", h, kv_a_out, "rep"))
    kv_b_out = nh * (arch.qk_nope_head_dim + arch.v_head_dim)
    out.append(Linear("kv_b_proj", "attention", arch.kv_lora_rank, kv_b_out, "col"))
    out.append(Linear("o_proj", "attention", nh * arch.v_head_dim, h, "row"))
    return out


def mlp_linears(arch: Architecture, index: int) -> list[Linear]:
    """The MLP of layer ``index``: SwiGLU, or routed experts + shared experts."""
    h = arch.hidden_size
    if not arch.is_moe_layer(index):
        i = arch.intermediate_size
        return [
            Linear("gate_proj", "mlp", h, i, "col"),
            Linear("up_proj", "mlp", h, i, "col"),
            Linear("down_proj", "mlp", i, h, "row"),
        ]
    e, i, k = arch.n_routed_experts, arch.moe_intermediate_size, arch.num_experts_per_tok
    out = [
        # transformers 5 stores experts fused: gate_up_proj [E, 2I, H], down_proj [E, H, I]
        Linear("gate_up_proj", "experts", h, 2 * i, "rep", count=e, per_token=k),
        Linear("down_proj", "experts", i, h, "rep", count=e, per_token=k),
    ]
    if arch.n_shared_experts:
        s = arch.n_shared_experts * i
        out += [
            Linear("gate_proj", "shared", h, s, "col"),
            Linear("up_proj", "shared", h, s, "col"),
            Linear("down_proj", "shared", s, h, "row"),
        ]
    return out


def layer_linears(arch: Architecture, index: int) -> list[Linear]:
    return attention_linears(arch) + mlp_linears(arch, index)


def layer_small_params(arch: Architecture, index: int) -> int:
    """Norms and the router of one layer (kept in bf16, replicated)."""
    n = 2 * arch.hidden_size
    if arch.attention == "mla":
        n += arch.kv_lora_rank + (arch.q_lora_rank or 0)
    if arch.is_moe_layer(index):
        n += arch.n_routed_experts * arch.hidden_size
    return n


@dataclass(frozen=True)
class ParameterCount:
    """Parameter totals (not bytes). ``by_group`` splits ``total`` by kind of weight."""

    total: int
    activated: int
    by_group: dict[str, int]


def count_parameters(arch: Architecture) -> ParameterCount:
    """Total and per-token activated parameters, from the layer shapes.

    Activated counts the embedding row, the LM head, attention, dense MLPs, shared experts,
    the router and ``num_experts_per_tok`` of the routed experts in each MoE layer.
    """
    groups: dict[str, int] = {}
    activated = 0

    def add(group: str, n: int, active: int) -> None:
        nonlocal activated
        groups[group] = groups.get(group, 0) + n
        activated += active

    emb = arch.vocab_size * arch.hidden_size
    add("embedding", emb, emb)
    if not arch.tie_word_embeddings:
        add("lm_head", emb, emb)
    add("norms_router", arch.hidden_size, arch.hidden_size)
    for index in range(arch.num_layers):
        small = layer_small_params(arch, index)
        add("norms_router", small, small)
        for lin in layer_linears(arch, index):
            active = lin.params // lin.count * lin.per_token if lin.count > 1 else lin.params
            add(lin.group, lin.params, active)
    return ParameterCount(sum(groups.values()), activated, groups)


# --------------------------------------------------------------------------- LoRA

#: names accepted in ``lora.target_modules`` (leaf names of Linear modules)
ATTENTION_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "q_b_proj")
ATTENTION_TARGETS += ("kv_a_proj_with_mqa", "kv_b_proj")
MLP_TARGETS = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraSpec:
    """The adapter: rank, scale, which Linear leaves, and whether routed experts too.

    Field names match :func:`agentgym.trainers.models.apply_lora` (``r``, ``alpha``,
    ``target_modules``, ``target_experts``); ``target_modules=None`` means every attention
    projection, as there.
    """

    r: int = 16
    alpha: float = 32.0
    target_modules: tuple[str, ...] | None = None
    target_experts: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.r, int) or self.r < 1:
            raise ConfigError(f"lora.r must be a positive integer, got {self.r!r}.")
        if self.target_modules is not None:
            known = ATTENTION_TARGETS + MLP_TARGETS
            for name in self.target_modules:
                if name not in known:
                    raise UnknownNameError("LoRA target module", name, known)


def lora_linears(arch: Architecture, index: int, lora: LoraSpec) -> list[Linear]:
    """The weights of layer ``index`` that carry an adapter."""
    wanted = set(lora.target_modules) if lora.target_modules is not None else None
    out = []
    for lin in layer_linears(arch, index):
        if lin.group == "experts":
            if lora.target_experts:
                out.append(lin)
        elif wanted is None:
            if lin.group == "attention":
                out.append(lin)
        elif lin.name in wanted:
            out.append(lin)
    return out


def lora_params(lin: Linear, r: int, tp: int = 1) -> float:
    """Adapter parameters of one weight on one TP rank (the split factor is divided)."""
    a, b = lin.in_features, lin.out_features
    if lin.split == "col":
        b = b / tp
    elif lin.split == "row":
        a = a / tp
    return lin.count * r * (a + b)


def count_lora_parameters(arch: Architecture, lora: LoraSpec) -> int:
    """Adapter parameters over the whole model (as peft creates them)."""
    total = 0.0
    for index in range(arch.num_layers):
        total += sum(lora_params(lin, lora.r) for lin in lora_linears(arch, index, lora))
    return int(total)


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class ParallelSpec:
    """Training layout. GPUs = tp * pp * dp; EP splits routed experts inside tp * dp."""

    tp: int = 1
    ep: int = 1
    pp: int = 1
    dp: int = 1
    zero_stage: int = 1
    sequence_parallel: bool = True

    def __post_init__(self) -> None:
        for name in ("tp", "ep", "pp", "dp"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"parallel.{name} must be a positive integer, got {value!r}.")
        if self.zero_stage not in (0, 1, 2, 3):
            raise ConfigError(f"parallel.zero_stage must be 0, 1, 2 or 3, got {self.zero_stage!r}.")
        if (self.tp * self.dp) % self.ep:
            raise ConfigError(
                f"parallel.ep={self.ep} must divide tp*dp={self.tp * self.dp} (experts are "
                "split among the GPUs of one pipeline stage)."
            )

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp


@dataclass(frozen=True)
class TrainSpec:
    """Training step settings. Dtypes are names from :data:`DTYPE_BYTES`."""

    micro_batch_size: int = 1
    seq_len: int = 4096
    activation_checkpointing: bool = True
    flash_attention: bool = True
    activation_dtype: str = "bf16"
    lora_dtype: str = "bf16"
    grad_dtype: str = "fp32"

    def __post_init__(self) -> None:
        for name in ("micro_batch_size", "seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"train.{name} must be a positive integer, got {value!r}.")
        for name in ("activation_dtype", "lora_dtype", "grad_dtype"):
            _check_dtype(f"train.{name}", getattr(self, name))
        if not self.activation_checkpointing:
            raise ConfigError(
                "train.activation_checkpointing: the planner models full activation "
                "checkpointing only; set it to true."
            )


@dataclass(frozen=True)
class RolloutSpec:
    """Rollout engine settings (vLLM names). GPUs = tp * pp * dp; ep splits experts."""

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
    weight_dtype: str | None = None  # None: the training base dtype

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
        _check_dtype("rollout.kv_cache_dtype", self.kv_cache_dtype)
        if self.weight_dtype is not None:
            _check_dtype("rollout.weight_dtype", self.weight_dtype)
        if (self.tp * self.dp) % self.ep:
            raise ConfigError(
                f"rollout.ep={self.ep} must divide rollout tp*dp={self.tp * self.dp}."
            )

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp


@dataclass(frozen=True)
class Hardware:
    gpus: int = 8
    gpu_mem_gib: float = 80.0

    def __post_init__(self) -> None:
        if not isinstance(self.gpus, int) or self.gpus < 1:
            raise ConfigError(f"hardware.gpus must be a positive integer, got {self.gpus!r}.")
        if not self.gpu_mem_gib > 0:
            raise ConfigError(f"hardware.gpu_mem_gib must be positive, got {self.gpu_mem_gib!r}.")


def _check_dtype(where: str, name: str) -> None:
    if name not in DTYPE_BYTES:
        raise UnknownNameError("dtype", str(name), DTYPE_BYTES, hint=f"(in {where})")


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class LineItem:
    """One kind of memory on one GPU. ``phase``: both, train or rollout."""

    name: str
    gib: float
    phase: Literal["both", "train", "rollout"]
    note: str = ""


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

    def phase_gib(self, phase: str) -> float:
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
        return sum(i.gib for i in self.items if i.name == name)

    def to_dict(self) -> dict[str, Any]:
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
        }


def _stages(num_layers: int, pp: int) -> list[range]:
    """Contiguous near-equal split; earlier stages take the remainder."""
    if pp > num_layers:
        raise ConfigError(f"pipeline size {pp} exceeds the {num_layers} layers; lower pp.")
    base, extra = divmod(num_layers, pp)
    out, start = [], 0
    for s in range(pp):
        n = base + (s < extra)
        out.append(range(start, start + n))
        start += n
    return out


def _weight_elems(lin: Linear, tp: int, ep: int) -> float:
    """Elements of one weight held by one GPU."""
    if lin.group == "experts":
        return lin.params / ep
    if lin.split == "rep":
        return lin.params
    return lin.params / tp


def _kv_heads_per_rank(arch: Architecture, tp: int) -> float:
    return max(1.0, arch.num_key_value_heads / tp)


def stage_weight_bytes(
    arch: Architecture,
    layers: Iterable[int],
    *,
    first: bool,
    last: bool,
    tp: int,
    ep: int,
    linear_bytes: float,
    other_bytes: float,
) -> float:
    """Bytes of base weights one GPU of a stage holds."""
    total = 0.0
    for index in layers:
        for lin in layer_linears(arch, index):
            elems = _weight_elems(lin, tp, ep)
            if (
                arch.attention == "gqa"
                and lin.name in ("k_proj", "v_proj")
                and tp > arch.num_key_value_heads
            ):
                elems = lin.params / arch.num_key_value_heads  # one whole KV head per rank
            total += elems * linear_bytes
        total += layer_small_params(arch, index) * other_bytes
    emb = arch.vocab_size * arch.hidden_size / tp
    if first:
        total += emb * other_bytes
    if last:
        total += (
            arch.hidden_size + (0 if arch.tie_word_embeddings and first else emb)
        ) * other_bytes
    return total


def layer_activation_elems(
    arch: Architecture,
    index: int,
    lora: LoraSpec | None,
    *,
    seq_len: int,
    flash_attention: bool = True,
) -> float:
    """Peak values per token while one recomputed layer runs its backward.

    Counted from what autograd saves in a PyTorch layer. A frozen Linear saves nothing
    (its weight needs no gradient, its output is not needed); an adapted one saves its
    input and the rank-r intermediate; with ``lora=None`` (full fine-tuning) every Linear
    saves its input. Norms save their input and 1/rms, attention saves q, k, v, the output
    and the log-sum-exp (plus the probabilities without a fused kernel), SwiGLU saves gate,
    up and act, a MoE layer saves router scores and, per routed copy of a token, the
    dispatched input, gate/up/act/product and the expert output (for the routing weight).
    Backward runs MLP first, then attention; the peak is the larger of (attention saved +
    MLP saved + MLP gradients) and (attention saved + attention gradients). The layer's
    input tensor is a pipeline boundary and is counted there, not here.
    """
    h, nh = arch.hidden_size, arch.num_attention_heads
    adapted = {lin.name for lin in lora_linears(arch, index, lora)} if lora else None
    n_lora = len(adapted) if adapted is not None else 0

    def saves_input(*names: str) -> bool:
        return adapted is None or any(n in adapted for n in names)

    # attention block
    att = 1.0  # 1/rms of the norm
    if arch.attention == "gqa":
        q, kv = nh * arch.head_dim, arch.num_key_value_heads * arch.head_dim
        att += h * saves_input("q_proj", "k_proj", "v_proj")
        att += 2 * q + 2 * kv + nh  # rotated q, k; v; output; log-sum-exp
        att_grad = 2 * q + 2 * kv
    else:
        qk, v = nh * arch.qk_head_dim, nh * arch.v_head_dim
        att += h * saves_input("q_a_proj", "q_proj", "kv_a_proj_with_mqa")
        if arch.q_lora_rank:
            att += arch.q_lora_rank + 1 + arch.q_lora_rank * saves_input("q_b_proj")
        att += arch.kv_lora_rank + 1 + arch.kv_lora_rank * saves_input("kv_b_proj")
        att += 2 * qk + 2 * v + nh  # q, k (rope included), v, output, log-sum-exp
        att_grad = 2 * qk + 2 * v
    if not flash_attention:
        att += nh * seq_len  # softmax probabilities
        att_grad += 2 * nh * seq_len  # their gradient and the softmax backward temporary
    # MLP block
    mlp = h + 1.0  # norm input (attention residual sum) and 1/rms
    mlp += h * saves_input("gate_proj", "up_proj")
    if arch.is_moe_layer(index):
        k, i, e = arch.num_experts_per_tok, arch.moe_intermediate_size, arch.n_routed_experts
        mlp += 2 * e + 4 * k  # router scores, top-k weights and indices
        mlp += k * (h + 4 * i + h + 1)
        mlp_grad = k * (4 * i + h)
        if arch.n_shared_experts:
            s = arch.n_shared_experts * i
            mlp += 3 * s + s * saves_input("down_proj")
            mlp_grad = max(mlp_grad, 4 * s + h)
    else:
        i = arch.intermediate_size
        mlp += 3 * i + i * saves_input("down_proj")
        mlp_grad = 4 * i + h
    if lora is not None:
        per_token = sum(lin.per_token for lin in lora_linears(arch, index, lora))
        mlp += lora.r * (per_token - n_lora)  # assign all rank-r values to the blocks
        att += lora.r * n_lora
    return max(att + mlp + mlp_grad, att + att_grad)


def _full_ft_states(total_params: int, gpus: int) -> list[LineItem]:
    per = total_params / gpus
    return [
        LineItem("base weights", per * 2 / GIB, "both", "bf16, ZeRO-3 over all GPUs"),
        LineItem("gradients", per * 2 / GIB, "train", "bf16, ZeRO-3 over all GPUs"),
        LineItem(
            "optimizer states", per * 12 / GIB, "both", "fp32 master + 2 Adam moments, ZeRO-3"
        ),
    ]


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
) -> Plan:
    """Per-GPU memory of LoRA training on a frozen (possibly quantized) base.

    Args:
        overheads: add the per-GPU constants (CUDA context, NCCL, fragmentation); off for
            a comparison with measured tensor bytes.

    Raises:
        ConfigError: the layout does not match the GPU count or the model.
    """
    _check_dtype("quantization.base_weights", base_dtype)
    _check_layout(arch, parallel, rollout, hardware)
    tp, ep, pp = parallel.tp, parallel.ep, parallel.pp
    lin_b = DTYPE_BYTES[base_dtype]
    other_b = DTYPE_BYTES["fp32" if base_dtype == "fp32" else "bf16"]
    act_b, lora_b, grad_b = (
        DTYPE_BYTES[x] for x in (train.activation_dtype, train.lora_dtype, train.grad_dtype)
    )
    master_b = 0.0 if train.lora_dtype == "fp32" else 4.0
    tokens = train.micro_batch_size * train.seq_len
    sp = tp if parallel.sequence_parallel else 1
    expert_replicas = parallel.tp * parallel.dp // ep
    assumptions = list(ASSUMPTIONS)

    per_stage: list[tuple[float, int, list[LineItem]]] = []
    stages = _stages(arch.num_layers, pp)
    for s, layers in enumerate(stages):
        first, last = s == 0, s == pp - 1
        base = stage_weight_bytes(
            arch,
            layers,
            first=first,
            last=last,
            tp=tp,
            ep=ep,
            linear_bytes=lin_b,
            other_bytes=other_b,
        )
        # adapter elements, split into what is replicated over DP and over expert-DP
        dense_lora = expert_lora = 0.0
        for index in layers:
            for lin in lora_linears(arch, index, lora):
                if lin.group == "experts":
                    expert_lora += lora_params(lin, lora.r) / ep
                else:
                    dense_lora += lora_params(lin, lora.r, tp)
        lora_elems = dense_lora + expert_lora

        def zero(elems_dense: float, elems_expert: float, stage_min: int) -> float:
            if parallel.zero_stage >= stage_min:
                return elems_dense / parallel.dp + elems_expert / expert_replicas
            return elems_dense + elems_expert

        params_bytes = zero(dense_lora, expert_lora, 3) * lora_b
        grads_bytes = zero(dense_lora, expert_lora, 2) * grad_b
        opt_bytes = zero(dense_lora, expert_lora, 1) * (master_b + 8.0)

        in_flight = min(pp - s, pp)
        boundary = in_flight * len(layers) * tokens * arch.hidden_size * act_b / sp
        per_token = max(
            layer_activation_elems(
                arch, i, lora, seq_len=train.seq_len, flash_attention=train.flash_attention
            )
            for i in layers
        )
        work = per_token * tokens * act_b / sp
        if base_dtype == "int4":  # one layer dequantized to bf16
            work += 2.0 * max(
                sum(_weight_elems(lin, tp, ep) for lin in layer_linears(arch, i)) for i in layers
            )
        loss = 3 * tokens * arch.vocab_size / tp * 4.0 if last else 0.0
        working = max(work, loss)
        which = "loss head (fp32 logits x3)" if loss > work else "one recomputed layer"
        other = f"; the other: {min(work, loss) / GIB:.2f} GiB" if last else ""

        items = [
            LineItem("base weights", base / GIB, "both", f"{base_dtype} Linear weights, bf16 rest"),
            LineItem(
                "LoRA params",
                params_bytes / GIB,
                "both",
                f"{lora_elems:,.0f} adapter values, {train.lora_dtype}",
            ),
            LineItem("LoRA grads", grads_bytes / GIB, "train", train.grad_dtype),
            LineItem(
                "optimizer states",
                opt_bytes / GIB,
                "both",
                "fp32 master + 2 moments" if master_b else "2 fp32 moments",
            ),
            LineItem(
                "activations: layer inputs",
                boundary / GIB,
                "train",
                f"{len(layers)} layers x {in_flight} micro-batches in flight",
            ),
            LineItem("activations: working set", working / GIB, "train", which + other),
        ]
        items += _rollout_items(arch, lora, rollout, base_dtype)
        tensor = max(_phase(items, "train"), _phase(items, "rollout"))
        if overheads:
            items += _overhead_items(tensor)
        peak = max(_phase(items, "train"), _phase(items, "rollout"))
        per_stage.append((peak, -s, items))
    _, neg_stage, items = max(per_stage, key=lambda t: (t[0], t[1]))
    stage = -neg_stage
    warnings = _rollout_warnings(items, rollout, hardware)
    if rollout is not None and rollout.sleep_level == 0:
        assumptions.append(
            "Sleep mode is off: the rollout engine keeps its weights and KV cache during training."
        )
    return Plan(
        mode="lora",
        items=tuple(items),
        gpu_mem_gib=hardware.gpu_mem_gib,
        assumptions=tuple(assumptions),
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
    items = _full_ft_states(counts.total, hardware.gpus)
    biggest_layer = max(
        sum(lin.params for lin in layer_linears(arch, i)) for i in range(arch.num_layers)
    )
    boundary = arch.num_layers * tokens * arch.hidden_size * act_b
    per_token = max(
        layer_activation_elems(
            arch, i, None, seq_len=train.seq_len, flash_attention=train.flash_attention
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
    items += _rollout_items(arch, None, rollout, "bf16")
    tensor = max(_phase(items, "train"), _phase(items, "rollout"))
    if overheads:
        items += _overhead_items(tensor)
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
        warnings=_rollout_warnings(items, rollout, hardware),
    )


def _phase(items: list[LineItem], phase: str) -> float:
    return sum(i.gib for i in items if i.phase in ("both", phase))


def _overhead_items(tensor_gib: float) -> list[LineItem]:
    return [
        LineItem("CUDA context", CUDA_CONTEXT_GIB, "both", "constant"),
        LineItem("NCCL buffers", COMM_BUFFERS_GIB, "both", "constant"),
        LineItem(
            "fragmentation reserve",
            FRAGMENTATION * tensor_gib,
            "both",
            f"{FRAGMENTATION:.0%} of the tensor bytes",
        ),
    ]


def _rollout_items(
    arch: Architecture, lora: LoraSpec | None, rollout: RolloutSpec | None, base_dtype: str
) -> list[LineItem]:
    """The rollout engine's memory on its worst GPU (largest stage, embedding and head)."""
    if rollout is None or rollout.engine != "vllm":
        return []
    dtype = rollout.weight_dtype or base_dtype
    lin_b, other_b = DTYPE_BYTES[dtype], DTYPE_BYTES["fp32" if dtype == "fp32" else "bf16"]
    if arch.attention == "mla":
        per_token_layer = arch.kv_lora_rank + arch.qk_rope_head_dim  # replicated over TP
    else:
        per_token_layer = 2 * arch.head_dim * _kv_heads_per_rank(arch, rollout.tp)
    kv_per_layer = (
        rollout.max_num_seqs
        * rollout.max_model_len
        * per_token_layer
        * DTYPE_BYTES[rollout.kv_cache_dtype]
    )
    candidates = []
    stages = _stages(arch.num_layers, rollout.pp)
    for s, layers in enumerate(stages):
        weights = stage_weight_bytes(
            arch,
            layers,
            first=s == 0,
            last=s == len(stages) - 1,
            tp=rollout.tp,
            ep=rollout.ep,
            linear_bytes=lin_b,
            other_bytes=other_b,
        )
        if lora is not None:  # the hot-swapped adapter, bf16
            weights += 2.0 * sum(
                lora_params(lin, lora.r) / rollout.ep
                if lin.group == "experts"
                else lora_params(lin, lora.r, rollout.tp)
                for i in layers
                for lin in lora_linears(arch, i, lora)
            )
        candidates.append((weights + kv_per_layer * len(layers), weights, len(layers)))
    _, weights, n_layers = max(candidates)
    kv = kv_per_layer * n_layers
    phase_w = "both" if rollout.sleep_level == 0 else "rollout"
    phase_kv = "both" if rollout.sleep_level == 0 else "rollout"
    return [
        LineItem(
            "rollout weights",
            weights / GIB,
            phase_w,
            f"{dtype}, tp={rollout.tp} ep={rollout.ep} pp={rollout.pp} (+ adapter)",
        ),
        LineItem(
            "rollout KV cache",
            kv / GIB,
            phase_kv,
            f"{rollout.max_num_seqs} seqs x {rollout.max_model_len} tokens x {n_layers} layers",
        ),
        LineItem("rollout workspace", ROLLOUT_WORKSPACE_GIB, phase_w, "constant"),
    ]


def _rollout_warnings(
    items: list[LineItem], rollout: RolloutSpec | None, hardware: Hardware
) -> tuple[str, ...]:
    if rollout is None or rollout.engine != "vllm":
        return ()
    need = sum(i.gib for i in items if i.name.startswith("rollout"))
    budget = rollout.gpu_memory_utilization * hardware.gpu_mem_gib
    if need > budget:
        return (
            f"the rollout engine needs {need:.1f} GiB but gpu_memory_utilization="
            f"{rollout.gpu_memory_utilization} gives it {budget:.1f} GiB; raise it or lower "
            "max_num_seqs / max_model_len.",
        )
    return ()


def _check_layout(
    arch: Architecture, parallel: ParallelSpec, rollout: RolloutSpec | None, hardware: Hardware
) -> None:
    if parallel.gpus != hardware.gpus:
        raise ConfigError(
            f"parallel layout tp*pp*dp = {parallel.tp}*{parallel.pp}*{parallel.dp} = "
            f"{parallel.gpus} GPUs, but hardware has {hardware.gpus}; change parallel.dp."
        )
    if arch.is_moe and arch.n_routed_experts % parallel.ep:
        raise ConfigError(
            f"parallel.ep={parallel.ep} must divide n_routed_experts={arch.n_routed_experts}."
        )
    if parallel.tp > 1 and arch.num_attention_heads % parallel.tp:
        raise ConfigError(
            f"parallel.tp={parallel.tp} must divide num_attention_heads={arch.num_attention_heads}."
        )
    if rollout is not None and rollout.engine == "vllm":
        if rollout.gpus != hardware.gpus:
            raise ConfigError(
                f"rollout layout tp*pp*dp = {rollout.gpus} GPUs, but hardware has "
                f"{hardware.gpus}; colocated rollout uses every GPU: change rollout.dp."
            )
        if arch.is_moe and arch.n_routed_experts % rollout.ep:
            raise ConfigError(
                f"rollout.ep={rollout.ep} must divide n_routed_experts={arch.n_routed_experts}."
            )


# --------------------------------------------------------------------------- config + table


@dataclass(frozen=True)
class PlanConfig:
    """What ``agentgym plan`` reads from a YAML config (other sections are ignored)."""

    arch: Architecture
    lora: LoraSpec
    parallel: ParallelSpec
    base_dtype: str
    train: TrainSpec
    rollout: RolloutSpec | None
    hardware: Hardware

    def with_hardware(
        self, gpus: int | None = None, gpu_mem_gib: float | None = None
    ) -> PlanConfig:
        """Override the GPU count (rescaling the data-parallel sizes) or the GPU memory."""
        hw = Hardware(
            gpus=gpus if gpus is not None else self.hardware.gpus,
            gpu_mem_gib=gpu_mem_gib if gpu_mem_gib is not None else self.hardware.gpu_mem_gib,
        )
        parallel, rollout = self.parallel, self.rollout
        if gpus is not None and gpus != self.hardware.gpus:
            parallel = replace(parallel, dp=_rescale("parallel", parallel.tp * parallel.pp, gpus))
            if rollout is not None:
                rollout = replace(rollout, dp=_rescale("rollout", rollout.tp * rollout.pp, gpus))
        return replace(self, hardware=hw, parallel=parallel, rollout=rollout)


def _rescale(section: str, per_replica: int, gpus: int) -> int:
    if gpus % per_replica:
        raise ConfigError(
            f"--gpus {gpus} is not a multiple of {section} tp*pp = {per_replica}; pick a "
            "multiple or change the layout in the config."
        )
    return gpus // per_replica


def _section(raw: Mapping[str, Any], name: str, cls: type) -> Any:
    data = raw.get(name) or {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"section {name!r} must be a mapping, got {type(data).__name__}.")
    known = {f.name for f in fields(cls)}
    for key in data:
        if key not in known:
            raise UnknownNameError(f"key in section {name!r}", str(key), known)
    data = dict(data)
    if "target_modules" in data and data["target_modules"] is not None:
        data["target_modules"] = tuple(data["target_modules"])
    try:
        return cls(**data)
    except TypeError as e:
        raise ConfigError(f"section {name!r}: {e}") from e


def plan_config_from_dict(raw: Mapping[str, Any]) -> PlanConfig:
    """Read the planner's sections of a trainer config.

    Sections: ``model.architecture`` (Hugging Face config fields), ``lora``, ``parallel``,
    ``quantization.base_weights``, ``train`` (only the planner's keys), ``rollout``
    (optional) and ``hardware``.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError("the config must be a YAML mapping with a 'model' section.")
    model = raw.get("model") or {}
    arch_raw = model.get("architecture") if isinstance(model, Mapping) else None
    if not isinstance(arch_raw, Mapping):
        raise ConfigError(
            "the config needs model.architecture: the model's config.json fields (hidden_size, "
            "num_hidden_layers, vocab_size, ...), so the planner can size it without downloading it."
        )
    train_raw = raw.get("train") or {}
    train_keys = {f.name for f in fields(TrainSpec)}
    train = _section(
        {"train": {k: v for k, v in train_raw.items() if k in train_keys}}, "train", TrainSpec
    )
    quant = raw.get("quantization") or {}
    base = str(quant.get("base_weights", "bf16")) if isinstance(quant, Mapping) else "bf16"
    _check_dtype("quantization.base_weights", base)
    return PlanConfig(
        arch=Architecture.from_config(arch_raw),
        lora=_section(raw, "lora", LoraSpec),
        parallel=_section(raw, "parallel", ParallelSpec),
        base_dtype=base,
        train=train,
        rollout=_section(raw, "rollout", RolloutSpec) if raw.get("rollout") else None,
        hardware=_section(raw, "hardware", Hardware),
    )


def plan_both(config: PlanConfig) -> tuple[Plan, Plan]:
    """The LoRA plan of the config and the full fine-tune of the same model."""
    lora = plan_lora(
        config.arch,
        lora=config.lora,
        parallel=config.parallel,
        base_dtype=config.base_dtype,
        train=config.train,
        rollout=config.rollout,
        hardware=config.hardware,
    )
    full = plan_full_finetune(
        config.arch, train=config.train, rollout=config.rollout, hardware=config.hardware
    )
    return lora, full


def format_plans(lora: Plan, full: Plan) -> str:
    """A side-by-side table: LoRA layout against full fine-tuning, GiB per GPU."""
    p = lora.params
    lines = [
        f"model: {p.total / 1e9:,.1f}B parameters, {p.activated / 1e9:,.1f}B activated per token; "
        f"LoRA adapter {lora.lora_params / 1e6:,.1f}M parameters",
        f"layout (LoRA): {_layout_text(lora.layout)}",
        f"GPUs: {lora.layout['gpus']} x {lora.gpu_mem_gib:g} GiB; worst pipeline stage: {lora.stage}",
        "",
        f"{'per GPU (GiB)':<28}{'phase':>8}{'LoRA':>10}{'full FT':>10}  note (LoRA)",
    ]
    names: list[str] = []
    for plan in (lora, full):
        for item in plan.items:
            if item.name not in names:
                names.append(item.name)
    for name in names:
        li = next((i for i in lora.items if i.name == name), None)
        fi = next((i for i in full.items if i.name == name), None)
        phase = (li or fi).phase  # type: ignore[union-attr]
        lines.append(
            f"{name:<28}{phase:>8}{_cell(li):>10}{_cell(fi):>10}  {li.note if li else fi.note}"  # type: ignore[union-attr]
        )
    lines += [
        "-" * 64,
        f"{'train phase':<28}{'':>8}{lora.train_gib:>10.1f}{full.train_gib:>10.1f}",
        f"{'rollout phase':<28}{'':>8}{lora.rollout_gib:>10.1f}{full.rollout_gib:>10.1f}",
        f"{'peak':<28}{'':>8}{lora.total_gib:>10.1f}{full.total_gib:>10.1f}",
        f"{'headroom':<28}{'':>8}{lora.headroom_gib:>10.1f}{full.headroom_gib:>10.1f}",
        f"{'fits':<28}{'':>8}{_yes(lora.fits):>10}{_yes(full.fits):>10}",
        "",
        f"LoRA: {'FITS' if lora.fits else 'DOES NOT FIT'} ({lora.total_gib:.1f} of "
        f"{lora.gpu_mem_gib:g} GiB). Full fine-tune: {'FITS' if full.fits else 'DOES NOT FIT'} "
        f"({full.total_gib:.1f} of {full.gpu_mem_gib:g} GiB).",
    ]
    for w in (*lora.warnings, *(f"full FT: {w}" for w in full.warnings)):
        lines.append(f"warning: {w}")
    lines += ["", "Assumptions:"]
    lines += [f"  - {a}" for a in (*lora.assumptions, *full.assumptions)]
    return "\n".join(lines)


def _layout_text(layout: Mapping[str, Any]) -> str:
    text = (
        f"base {layout['base_weights']}, tp={layout['tp']} ep={layout['ep']} "
        f"pp={layout['pp']} dp={layout['dp']} zero={layout['zero_stage']}"
    )
    r = layout.get("rollout")
    if r:
        text += (
            f"; rollout {r['engine']} tp={r['tp']} ep={r['ep']} pp={r['pp']} dp={r['dp']}, "
            f"{r['max_num_seqs']} seqs x {r['max_model_len']}, sleep level {r['sleep_level']}"
        )
    return text


def _cell(item: LineItem | None) -> str:
    if item is None:
        return "-"
    return f"{item.gib:.2f}" if item.gib < 10 else f"{item.gib:.1f}"


def _yes(flag: bool) -> str:
    return "yes" if flag else "NO"


def gib(n_bytes: float) -> float:
    """Bytes to GiB."""
    return n_bytes / GIB


__all__ = [
    "ASSUMPTIONS",
    "DTYPE_BYTES",
    "Architecture",
    "Hardware",
    "LineItem",
    "LoraSpec",
    "ParallelSpec",
    "Plan",
    "PlanConfig",
    "RolloutSpec",
    "TrainSpec",
    "count_lora_parameters",
    "count_parameters",
    "format_plans",
    "plan_both",
    "plan_config_from_dict",
    "plan_full_finetune",
    "plan_lora",
]
