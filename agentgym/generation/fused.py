"""A fused one-token decode step for Llama-family decoders (the HF engine's fast path).

A decode step of the lean loop (:mod:`agentgym.generation.lean`) runs one token per
row through the whole model. On small models, and on CPU, most of that step is not
arithmetic but the framework around it: module calls, hooks, output dataclasses, the
cache and mask plumbing of a general ``forward``. :class:`FusedDecoder` computes the
same step from the model's own weights with a few tensor operations per layer:

* the q/k/v projections are one matmul (their weights concatenated), as are gate and
  up; the residual additions are folded into the output matmuls (``addmm``);
* RMSNorm is ``torch.nn.functional.rms_norm``; rotary embeddings come from a table of
  cos/sin computed once per call by the model's own rotary module (so every static
  RoPE variant the model was configured with is honoured);
* keys and values are written into the same cache layers the prefill filled (the
  loop's preallocated ``GrowingKVLayer``), and attention is single-query grouped
  attention against them with the loop's additive mask.

It is used only where it reproduces the model exactly: decoders whose layers are the
Llama/Qwen2/Mistral block (pre-norm RMSNorm, rotary attention with optional q/k/v
biases, SwiGLU MLP), full attention, static RoPE (:meth:`FusedDecoder.build` returns
``None`` for anything else and the loop calls the model's ``forward``). The weights are
read when it is built, inside the loop's LoRA-folded context, so an adapter is
included; the concatenated weights are one extra copy of the attention and MLP input
weights for the duration of a call. Results match the model's ``forward`` to float
rounding (tested to 1e-5 on the logits in float32; in bfloat16, where RMSNorm rounds
differently, a 16-request check gave the same tokens and log-probs within 0.008).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

#: Model types whose decoder layer is the block :class:`FusedDecoder` computes.
FUSED_MODEL_TYPES = frozenset({"llama", "qwen2", "mistral"})
#: RoPE types whose cos/sin depend only on the position (not on the sequence length).
_STATIC_ROPE = frozenset({"default", "linear", "llama3", "yarn"})
#: A layer must have exactly these children to be computed by the fused step.
_LAYER_CHILDREN = {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"}
_ATTN_CHILDREN = {"q_proj", "k_proj", "v_proj", "o_proj"}
_MLP_CHILDREN = {"gate_proj", "up_proj", "down_proj", "act_fn"}


@dataclass
class _Layer:
    norm_in: torch.Tensor
    qkv: torch.Tensor  # [(H + 2 Hkv) d, hidden]
    qkv_bias: torch.Tensor | None
    o: torch.Tensor  # [hidden, H d]
    o_bias: torch.Tensor | None
    norm_post: torch.Tensor
    gate_up: torch.Tensor  # [2 I, hidden]
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor  # [hidden, I]
    down_bias: torch.Tensor | None


def _cat_bias(*linears: nn.Linear) -> torch.Tensor | None:
    """The concatenated biases of ``linears`` (zeros for one without), or ``None``."""
    if all(m.bias is None for m in linears):
        return None
    return torch.cat(
        [m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in linears]
    )


class FusedDecoder:
    """One decode step (one new token per row) of a Llama-family causal LM.

    Build with :meth:`build` (inside ``torch.inference_mode`` and, with LoRA, inside
    :func:`~agentgym.generation.lora_fold.merged_lora`), then call :meth:`step` once per
    token with the rows' tokens and positions, the loop's cache and its additive mask.
    """

    def __init__(self, model: nn.Module, max_positions: int) -> None:
        inner = model.model
        cfg = model.config
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(getattr(cfg, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(
            getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        )
        self.eps = float(cfg.rms_norm_eps)
        self.embed = inner.embed_tokens.weight
        self.final_norm = inner.norm.weight
        self.lm_head = model.lm_head.weight
        self.lm_head_bias = getattr(model.lm_head, "bias", None)
        self.layers = []
        q_rows = self.heads * self.head_dim
        for layer in inner.layers:
            a, m = layer.self_attn, layer.mlp
            # the attention scale is folded into the query rows (RoPE is linear, so
            # scaling before it is the same as scaling the scores after it)
            qkv = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
            qkv[:q_rows] *= a.scaling
            qkv_bias = _cat_bias(a.q_proj, a.k_proj, a.v_proj)
            if qkv_bias is not None:
                qkv_bias[:q_rows] *= a.scaling
            self.layers.append(
                _Layer(
                    norm_in=layer.input_layernorm.weight,
                    qkv=qkv,
                    qkv_bias=qkv_bias,
                    o=a.o_proj.weight,
                    o_bias=a.o_proj.bias,
                    norm_post=layer.post_attention_layernorm.weight,
                    gate_up=torch.cat([m.gate_proj.weight, m.up_proj.weight]),
                    gate_up_bias=_cat_bias(m.gate_proj, m.up_proj),
                    down=m.down_proj.weight,
                    down_bias=m.down_proj.bias,
                )
            )
        positions = torch.arange(max_positions, device=self.embed.device)[None]
        cos, sin = inner.rotary_emb(self.embed[:1][None], positions)
        half = self.head_dim // 2
        self.cos = cos[0]  # [positions, d]
        # rotate_half(x) * sin == x[..., [half:, :half]] * [-sin[:half], sin[half:]]
        self.sin = torch.cat([-sin[0, :, :half], sin[0, :, half:]], dim=-1)

    @classmethod
    def build(cls, model: nn.Module, max_positions: int) -> FusedDecoder | None:
        """The fused step for ``model``, or ``None`` where it would not reproduce it."""
        if not supported(model):
            return None
        return cls(model, max_positions)

    def step(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        cache: Any,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """Logits ``[rows, vocab]`` for the next token after ``tokens``.

        Args:
            tokens: ``[rows]`` or ``[rows, 1]`` token ids.
            positions: ``[rows]`` or ``[rows, 1]`` their position ids.
            cache: the loop's cache; layer ``i``'s ``update(k, v)`` stores the new
                keys/values and returns all of them (``[rows, kv_heads, keys, d]``).
            mask: additive ``[rows, 1, 1, keys]`` mask (0 where a key is attended).
        """
        rows = tokens.shape[0]
        h, hkv, d = self.heads, self.kv_heads, self.head_dim
        pos = positions.reshape(rows)
        cos = self.cos.index_select(0, pos)[:, None]  # [rows, 1, d]
        sin = self.sin.index_select(0, pos)[:, None]
        x = self.embed.index_select(0, tokens.reshape(rows))
        width = x.shape[-1]
        for i, lw in enumerate(self.layers):
            hn = F.rms_norm(x, (width,), lw.norm_in, self.eps)
            qkv = F.linear(hn, lw.qkv, lw.qkv_bias)
            qk = qkv[:, : (h + hkv) * d].view(rows, h + hkv, d)
            qk = qk * cos + qk.roll(d // 2, dims=-1) * sin  # RoPE on queries and keys at once
            v = qkv[:, (h + hkv) * d :].view(rows, hkv, 1, d)
            keys, values = cache.layers[i].update(qk[:, h:, None], v)
            scores = torch.matmul(qk[:, :h].view(rows, hkv, h // hkv, d), keys.transpose(-1, -2))
            probs = torch.softmax(scores + mask, dim=-1, dtype=torch.float32).to(qk.dtype)
            attn = torch.matmul(probs, values).reshape(rows, h * d)
            x = (
                torch.addmm(x, attn, lw.o.t())
                if lw.o_bias is None
                else x + F.linear(attn, lw.o, lw.o_bias)
            )
            hn = F.rms_norm(x, (width,), lw.norm_post, self.eps)
            gate, up = F.linear(hn, lw.gate_up, lw.gate_up_bias).chunk(2, dim=-1)
            act = F.silu(gate) * up
            x = (
                torch.addmm(x, act, lw.down.t())
                if lw.down_bias is None
                else x + F.linear(act, lw.down, lw.down_bias)
            )
        x = F.rms_norm(x, (width,), self.final_norm, self.eps)
        return F.linear(x, self.lm_head, self.lm_head_bias)


def supported(model: nn.Module) -> bool:
    """Whether :class:`FusedDecoder` computes exactly what ``model``'s forward does."""
    cfg = getattr(model, "config", None)
    inner = getattr(model, "model", None)
    if cfg is None or inner is None or getattr(cfg, "model_type", None) not in FUSED_MODEL_TYPES:
        return False
    if not isinstance(getattr(model, "lm_head", None), nn.Linear):
        return False
    if getattr(cfg, "hidden_act", None) not in ("silu", "swish"):
        return False
    if getattr(cfg, "use_sliding_window", False) or (
        getattr(cfg, "sliding_window", None) is not None and cfg.model_type == "mistral"
    ):
        return False
    layer_types = getattr(cfg, "layer_types", None)
    if layer_types is not None and any(t != "full_attention" for t in layer_types):
        return False
    rope = getattr(cfg, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") not in _STATIC_ROPE:
        return False
    if getattr(cfg, "pretraining_tp", 1) not in (None, 1):
        return False
    for name in ("embed_tokens", "norm", "rotary_emb", "layers"):
        if not hasattr(inner, name):
            return False
    for layer in inner.layers:
        if {n for n, _ in layer.named_children()} != _LAYER_CHILDREN:
            return False
        if {n for n, _ in layer.self_attn.named_children()} != _ATTN_CHILDREN:
            return False
        if {n for n, _ in layer.mlp.named_children()} != _MLP_CHILDREN:
            return False
        linears = [getattr(layer.self_attn, n) for n in _ATTN_CHILDREN] + [
            getattr(layer.mlp, n) for n in ("gate_proj", "up_proj", "down_proj")
        ]
        if any(type(m) is not nn.Linear for m in linears):  # e.g. an unfolded LoRA wrapper
            return False
        if type(layer.mlp.act_fn).__name__ not in ("SiLUActivation", "SiLU"):
            return False
        norms = (layer.input_layernorm, layer.post_attention_layernorm)
        if any(
            not hasattr(n, "variance_epsilon") or n.variance_epsilon != cfg.rms_norm_eps
            for n in norms
        ):
            return False
    return True
