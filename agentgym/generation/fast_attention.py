"""The lean loop's fast path: a preallocated KV cache, an additive mask, one-query attention.

On models whose attention is known to be plain full attention (:data:`FAST_MODEL_TYPES`,
no sliding windows; :func:`fast_path_ok`) the lean decode loop (:mod:`.lean`) replaces
three general mechanisms of transformers by cheaper ones that compute the same thing:

* the KV cache is preallocated and grown geometrically (:func:`growing_kv_layer_class`)
  instead of concatenated at every step;
* the decode-step mask is an additive mask opened one position per step
  (:class:`DecodeMask`) instead of a causal mask rebuilt per step;
* single-query attention is :func:`decode_attention`: grouped-query attention without
  copying the K/V heads, registered with transformers under :data:`DECODE_ATTENTION`
  and switched on for the duration of a call (:func:`attention_implementation`).

Other models use ``DynamicCache``, the 2-D padding mask and their own attention.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

#: Model types whose attention the lean loop's fast path (preallocated cache, additive
#: decode mask, :func:`decode_attention`) is known to reproduce: full causal attention,
#: no soft-capping, no attention sinks. Others take the ``DynamicCache`` path.
FAST_MODEL_TYPES = frozenset(
    {"qwen2", "qwen3", "llama", "mistral", "qwen2_moe", "qwen3_moe", "deepseek_v3"}
)
#: Name under which :func:`decode_attention` is registered with transformers.
DECODE_ATTENTION = "agentgym_decode"


def growing_kv_layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class GrowingKVLayer(DynamicLayer):
        """A cache layer that writes into preallocated storage instead of concatenating.

        ``DynamicLayer`` copies the whole cache at every step (``torch.cat``); this one
        writes the new positions into a buffer that grows geometrically up to
        ``max_length`` positions and hands out views of the filled part. Only the lean
        decode loop uses it (it supports ``update``, ``get_seq_length`` and
        ``batch_select_indices``, which is what that loop needs).
        """

        def __init__(self, max_length: int) -> None:
            super().__init__()
            self.max_length = max_length
            self._length = 0
            self._k: torch.Tensor | None = None
            self._v: torch.Tensor | None = None

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            end = self._length + key_states.shape[-2]
            if self._k is None or self._v is None or end > self._k.shape[-2]:
                self._grow(key_states, value_states, end)
            assert self._k is not None and self._v is not None
            self._k[:, :, self._length : end] = key_states
            self._v[:, :, self._length : end] = value_states
            self._length = end
            self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
            return self.keys, self.values

        def _grow(self, key_states: torch.Tensor, value_states: torch.Tensor, need: int) -> None:
            size = self._k.shape[-2] if self._k is not None else 0
            capacity = max(need, min(self.max_length, max(2 * size, need + 64)))
            k = key_states.new_empty((*key_states.shape[:2], capacity, key_states.shape[-1]))
            v = value_states.new_empty((*value_states.shape[:2], capacity, value_states.shape[-1]))
            if self._k is not None and self._v is not None and self._length:
                k[:, :, : self._length] = self._k[:, :, : self._length]
                v[:, :, : self._length] = self._v[:, :, : self._length]
            self._k, self._v = k, v

        def get_seq_length(self) -> int:
            return self._length

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self._k is None or self._v is None:
                return
            index = indices.to(self._k.device)
            n = self._length
            k = self._k.new_empty((len(index), *self._k.shape[1:]))
            v = self._v.new_empty((len(index), *self._v.shape[1:]))
            k[:, :, :n] = self._k[:, :, :n].index_select(0, index)
            v[:, :, :n] = self._v[:, :, :n].index_select(0, index)
            self._k, self._v = k, v
            self.keys, self.values = k[:, :, :n], v[:, :, :n]

    return GrowingKVLayer


def decode_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention for one query position per row, registered with transformers' attention
    interface under :data:`DECODE_ATTENTION` and used only by the lean decode loop.

    The math of eager attention (scores in the model's dtype, softmax in float32) with
    an additive ``[batch, 1, 1, keys]`` mask, but grouped-query heads are handled by a
    reshape of the query rather than by copying every K/V head (``repeat_kv``), which
    is most of the cost of a decode step's attention on CPU. Anything else (several
    query positions, training-time dropout) goes to transformers' SDPA attention.
    """
    b, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    if q_len != 1 or heads % kv_heads or (dropout and module.training):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    q = query.reshape(b, kv_heads, heads // kv_heads, dim)
    scores = torch.matmul(q, key.transpose(-1, -2)) * (
        scaling if scaling is not None else dim**-0.5
    )
    if attention_mask is not None:
        scores = scores + attention_mask
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(probs, value)  # [b, kv_heads, group, value dim]
    return out.reshape(b, 1, heads, value.shape[-1]), None


_registered = False


def register_decode_attention() -> None:
    """Register :func:`decode_attention` with transformers (once per process)."""
    global _registered
    if not _registered:
        from transformers import AttentionInterface

        AttentionInterface.register(DECODE_ATTENTION, decode_attention)
        _registered = True


@contextlib.contextmanager
def attention_implementation(model: nn.Module, name: str) -> Iterator[None]:
    """Route the model's attention through ``name`` inside the block (every config object)."""
    configs = {
        id(c): c
        for c in (getattr(m, "config", None) for m in model.modules())
        if c is not None and hasattr(c, "_attn_implementation")
    }
    before = {k: c._attn_implementation for k, c in configs.items()}
    try:
        for c in configs.values():
            c._attn_implementation = name
        yield
    finally:
        for k, c in configs.items():
            c._attn_implementation = before[k]


def fast_path_ok(model: nn.Module) -> bool:
    """Whether the model's attention is plain full attention the fast path reproduces."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in FAST_MODEL_TYPES:
        return False
    layer_types = getattr(cfg, "layer_types", None)
    if layer_types is not None and any(t != "full_attention" for t in layer_types):
        return False
    sliding = getattr(cfg, "use_sliding_window", False) or (
        cfg.model_type == "mistral" and getattr(cfg, "sliding_window", None) is not None
    )
    return not sliding


class DecodeMask:
    """The attention mask of the lean loop's decode steps.

    Fast path: an additive ``[rows, 1, 1, positions]`` mask preallocated for every
    position the call can reach, opened one position per step (transformers passes a
    4-D mask through unchanged, so no causal mask is rebuilt per step). Otherwise the
    2-D padding mask, one column longer per step, from which the model builds its own.
    """

    def __init__(
        self, padding: torch.Tensor, max_positions: int, dtype: torch.dtype, additive: bool
    ) -> None:
        self.length = padding.shape[1]
        self.additive = additive
        if additive:
            lowest = torch.finfo(dtype).min
            self.mask = torch.full((padding.shape[0], 1, 1, max_positions), lowest, dtype=dtype)
            self.mask[:, 0, 0, : self.length] = torch.where(padding.bool(), 0.0, lowest)
        else:
            self.mask = padding

    def to(self, device: torch.device) -> DecodeMask:
        self.mask = self.mask.to(device)
        return self

    def keep(self, index: torch.Tensor) -> None:
        """Keep only these rows."""
        self.mask = self.mask.index_select(0, index)

    def next_step(self) -> torch.Tensor:
        """The mask for a step that writes one more position for every row."""
        if self.additive:
            self.mask[:, :, :, self.length] = 0.0
            self.length += 1
            return self.mask[:, :, :, : self.length]
        self.mask = torch.cat([self.mask, self.mask.new_ones((self.mask.shape[0], 1))], dim=1)
        self.length += 1
        return self.mask
