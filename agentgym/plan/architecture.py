"""Model shapes and parameter counts: what the planner knows about a transformer.

* :class:`Architecture` reads a Hugging Face config (a dict or a ``PretrainedConfig``):
  Qwen2/Llama-style dense models with grouped-query attention, and DeepSeek-V3-style MoE
  models with multi-head latent attention (MLA), dense first layers, routed experts and
  shared experts.
* :func:`layer_linears` lists the weight matrices of one decoder layer as :class:`Linear`
  records (shape, how tensor parallelism splits it, how often a token passes through it);
  everything else in the planner is computed from these records.
* :func:`count_parameters` gives the total and the per-token activated parameter count
  from the layer shapes alone (nothing is hard-coded per model).
* :func:`count_lora_parameters` counts a LoRA adapter the way peft builds it: ``r * (in +
  out)`` per adapted Linear, and ``r * E * (in + out)`` per fused ``[E, out, in]`` expert
  parameter (one rank-``r`` adapter per expert).

Pure arithmetic: nothing here touches torch or a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any, Literal

from agentgym import ConfigError, UnknownNameError


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

    @cached_property
    def _hash(self) -> int:
        return hash(tuple(getattr(self, f.name) for f in fields(self)))

    def __hash__(self) -> int:
        # computed once: the planner's caches hash the architecture on every look-up
        return self._hash

    @property
    def is_moe(self) -> bool:
        """Whether the model has routed experts."""
        return self.n_routed_experts > 0

    def is_moe_layer(self, index: int) -> bool:
        """DeepSeek's rule: MoE from layer ``first_k_dense_replace`` on, every ``freq``-th."""
        return (
            self.is_moe and index >= self.first_k_dense_replace and index % self.moe_layer_freq == 0
        )

    @property
    def qk_head_dim(self) -> int:
        """MLA: the query/key width of one head (the no-rope and rope parts)."""
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
    """Every weight matrix of decoder layer ``index``: attention, then the MLP."""
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
#: left out of the default targets, as apply_lora does (vLLM folds MLA's kv_b_proj)
NOT_BY_DEFAULT = ("kv_b_proj",)


@dataclass(frozen=True)
class LoraSpec:
    """The adapter: rank, scale, which Linear leaves, and whether routed experts too.

    Field names match :func:`agentgym.trainers.models.apply_lora` (``r``, ``alpha``,
    ``target_modules``, ``target_experts``); ``target_modules=None`` means every attention
    projection, as there. ``critic_r``: the rank of PPO/VAPO's critic adapter on the same
    base (``critic.r`` with ``critic.share_base``; 0 without a critic), which adapts the
    same Linear leaves but not the routed experts (:class:`~agentgym.trainers.critic.Critic`)
    and trains beside the policy's; the engine never holds it.
    """

    r: int = 16
    alpha: float = 32.0
    target_modules: tuple[str, ...] | None = None
    target_experts: bool = True
    critic_r: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.r, int) or self.r < 1:
            raise ConfigError(f"lora.r must be a positive integer, got {self.r!r}.")
        if not isinstance(self.critic_r, int) or self.critic_r < 0:
            raise ConfigError(f"critic.r must be a positive integer, got {self.critic_r!r}.")
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
            if lin.group == "attention" and lin.name not in NOT_BY_DEFAULT:
                out.append(lin)
        elif lin.name in wanted:
            out.append(lin)
    return out


def critic_spec(lora: LoraSpec) -> LoraSpec | None:
    """The critic's adapter as a spec of its own (None without a critic)."""
    if lora.critic_r == 0:
        return None
    return LoraSpec(r=lora.critic_r, target_modules=lora.target_modules, target_experts=False)


def trained_adapter_elems(
    arch: Architecture, lora: LoraSpec, start: int, stop: int, tp: int, ep: int
) -> tuple[float, float]:
    """Adapter values one GPU of a stage trains over layers ``[start, stop)``: ``(dense,
    routed experts)``, the critic's adapter included (its optimizer states and gradients
    live beside the policy's)."""
    dense = expert = 0.0
    for spec in (lora, critic_spec(lora)):
        if spec is None:
            continue
        for index in range(start, stop):
            for lin in lora_linears(arch, index, spec):
                if lin.group == "experts":
                    expert += lora_params(lin, spec.r) / ep
                else:
                    dense += lora_params(lin, spec.r, tp)
    return dense, expert


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
