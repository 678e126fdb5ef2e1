"""Work per token: FLOPs and weight bytes of a run of layers, as the time model needs them.

:func:`layer_sums` adds up, for a contiguous run of decoder layers (a pipeline stage),
the weight matrices by how parallelism splits them (tensor-parallel, replicated, GQA
key/value, routed experts), the per-token FLOPs of attention over its context (training
form, and DeepSeek's absorbed form for MLA decode), the KV-cache values per token and the
LoRA adapter's extra FLOPs. Everything else in the time model is a few multiplications
on these sums. Results are cached per (architecture, layer range, adapter).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from agentgym.plan.architecture import (
    Architecture,
    LoraSpec,
    layer_linears,
    layer_small_params,
    lora_linears,
)


@dataclass(frozen=True)
class LayerSums:
    """Parameter and FLOP sums over a run of layers (no parallelism applied yet).

    Attributes:
        layers: how many layers.
        moe_layers: how many of them have routed experts.
        split: Linear parameters split by tensor parallelism (column or row).
        replicated: Linear parameters every TP rank holds whole (MLA's q_a, kv_a).
        kv: GQA key/value parameters (split over TP down to one whole KV head).
        experts: routed-expert parameters (all experts).
        active_experts: routed-expert parameters one token passes through (top-k).
        small: norms and router (kept in 16 bits).
        attn_train: forward attention FLOPs per token per context token (scores and
            values, all heads), as training computes them.
        attn_decode: the same for one decoded token (MLA: the absorbed form over the
            compressed latent, which is what vLLM and SGLang run).
        kv_values: KV-cache values per token over these layers (MLA: the latent and the
            rope key, which every TP rank keeps whole; GQA: K and V of all KV heads).
    """

    layers: int
    moe_layers: int
    split: float
    replicated: float
    kv: float
    experts: float
    active_experts: float
    small: float
    attn_train: float
    attn_decode: float
    kv_values: float

    @property
    def dense(self) -> float:
        """Every non-expert Linear parameter."""
        return self.split + self.replicated + self.kv

    def matmul_flops(self) -> float:
        """Forward FLOPs per token of the Linear layers (2 per multiply-add)."""
        return 2.0 * (self.dense + self.active_experts)

    def dense_flops_per_gpu(self, tp: int) -> float:
        """Forward non-expert Linear FLOPs per token on one TP rank."""
        return 2.0 * (self.split / tp + self.replicated + self.kv / tp)

    def dense_bytes_per_gpu(self, tp: int, kv_heads: int, linear_bytes: float) -> float:
        """Bytes of non-expert weights on one TP rank (norms and router in bf16)."""
        kv_split = min(tp, kv_heads) if kv_heads else tp
        elems = self.split / tp + self.replicated + self.kv / kv_split
        return elems * linear_bytes + self.small * 2.0


@lru_cache(maxsize=4096)
def layer_sums(arch: Architecture, start: int, stop: int) -> LayerSums:
    """Sums over layers ``start`` .. ``stop - 1`` (see :class:`LayerSums`)."""
    split = rep = kv = experts = active = small = 0.0
    moe = 0
    for index in range(start, stop):
        for lin in layer_linears(arch, index):
            if lin.group == "experts":
                experts += lin.params
                active += lin.params / lin.count * lin.per_token
            elif arch.attention == "gqa" and lin.name in ("k_proj", "v_proj"):
                kv += lin.params
            elif lin.split == "rep":
                rep += lin.params
            else:
                split += lin.params
        small += layer_small_params(arch, index)
        moe += arch.is_moe_layer(index)
    n = stop - start
    nh = arch.num_attention_heads
    if arch.attention == "mla":
        attn_train = 2.0 * nh * (arch.qk_head_dim + arch.v_head_dim)
        # absorbed: scores over kv_lora_rank + rope values, output over kv_lora_rank
        attn_decode = 2.0 * nh * (2 * arch.kv_lora_rank + arch.qk_rope_head_dim)
        kv_values = float(arch.kv_lora_rank + arch.qk_rope_head_dim)
    else:
        attn_train = attn_decode = 2.0 * nh * 2 * arch.head_dim
        kv_values = 2.0 * arch.head_dim * arch.num_key_value_heads
    return LayerSums(
        layers=n,
        moe_layers=moe,
        split=split,
        replicated=rep,
        kv=kv,
        experts=experts,
        active_experts=active,
        small=small,
        attn_train=attn_train * n,
        attn_decode=attn_decode * n,
        kv_values=kv_values * n,
    )


@lru_cache(maxsize=4096)
def lora_flops(arch: Architecture, lora: LoraSpec, start: int, stop: int) -> float:
    """Forward FLOPs per token of the adapter's rank-r products over these layers."""
    total = 0.0
    for index in range(start, stop):
        for lin in lora_linears(arch, index, lora):
            total += 2.0 * lora.r * (lin.in_features + lin.out_features) * lin.per_token
    return total


def head_flops(arch: Architecture) -> float:
    """Forward FLOPs per token of the LM head (the embedding lookup is free)."""
    return 2.0 * arch.hidden_size * arch.vocab_size


def head_bytes(arch: Architecture, tp: int) -> float:
    """bf16 bytes of the (vocabulary-parallel) LM head on one TP rank."""
    return 2.0 * arch.hidden_size * arch.vocab_size / tp


def touched_share(tokens: float, top_k: int, experts: int) -> float:
    """Expected share of experts at least one of ``tokens`` tokens is routed to."""
    if experts <= 0:
        return 1.0
    return 1.0 - (1.0 - top_k / experts) ** max(tokens, 0.0)
