"""The embedded rollout engine: batched generation on a local Hugging Face model (CPU or GPU).

Sampling is done by agentgym rather than by ``generate``'s own sampler, so that it is

* **per-request reproducible**: each request has its own seed (the rollout derives one
  from the run seed, the task, the sample and the turn); row ``i`` of a batch draws its
  Gumbel noise from its own generator, so a completion does not depend on which other
  requests happened to share its batch, nor on the global RNG;
* **exact about log-probabilities**: the log-probability recorded for each token is
  that of the distribution it was drawn from (temperature and top-p applied), computed
  from the same scores the sampler used.

Gumbel-max: ``argmax(log p + Gumbel)`` is an exact sample of ``p``; temperature 0 is
``argmax(log p)`` (greedy).

Two decode paths produce the same tokens for the same seeds:

* ``decode="lean"`` (default): agentgym's own loop over the model's forward. The
  prompts are prefilled once per distinct prompt (the ``G`` samples of a task share
  one) and the KV cache is copied out to the rows; each step then runs one token per
  row. A row leaves the batch as soon as it is finished (eos, its own ``max_tokens``, or
  a stop string), so the others stop paying for it. Each row's noise is drawn from its
  generator a chunk of steps at a time (the same numbers as one draw per step). On
  models whose attention is known to be plain full attention (:data:`FAST_MODEL_TYPES`,
  no sliding windows) the cache is preallocated and grown geometrically instead of
  concatenated every step, the decode-step mask is built incrementally, and
  single-query attention is computed by :func:`decode_attention` (grouped-query
  attention without copying the K/V heads); other models use ``DynamicCache`` and
  their own attention. On Llama-family models the decode step itself is computed by
  :class:`~agentgym.trainers.engines.fused.FusedDecoder` (a few fused tensor
  operations per layer instead of the model's general ``forward``). With a LoRA adapter (peft), the adapter is folded into copies
  of the adapted weights for the duration of the call (:func:`merged_lora`) so that an
  adapted layer runs one matmul instead of three and no peft wrapper code; the
  trainer's weights and modules are put back untouched afterwards (the original
  tensors, not an un-merge). Top-p filters only the rows that ask for it (the
  ``generate`` path filters every row of a batch in which any row asks, which can drop
  a top-p 1 row's negligible tail tokens depending on its batch).
* ``decode="generate"``: ``model.generate`` with a logits processor that samples the
  same way (:class:`_SeededSampler`); every row runs until the longest is done. Kept as
  the reference implementation the lean loop is tested against.

Log-probabilities come from the logits of the weights that produced the sample, so with
a merged adapter they differ from the learner's recomputation by float rounding only
(about 1e-6; the trainer reports it as ``charts/logprob_mismatch``).

Stop strings are applied after generation (the stop string's tokens are kept in
``token_ids`` so that training sees where the reply ended; the text excludes it); the
lean loop also checks them every :data:`STOP_CHECK_EVERY` steps so that a stopped row
leaves the batch early. The kept tokens are the same either way as long as the text of
a reply's first tokens is a prefix of the text of the whole reply (true of byte-level
BPE; a tokenizer whose decoding rewrites spaces around later punctuation could, in
rare cases, stop at a stop string that the full text would not show).
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from agentgym import Completion, ConfigError
from agentgym.trainers.engines.base import (
    GenerationRequest,
    RolloutEngine,
    finish_completion,
    first_stop,
)
from agentgym.trainers.engines.fused import FusedDecoder
from agentgym.trainers.tokenizer import encode_prompt

#: Model types whose attention the lean loop's fast path (preallocated cache, additive
#: decode mask, :func:`decode_attention`) is known to reproduce: full causal attention,
#: no soft-capping, no attention sinks. Others take the ``DynamicCache`` path.
FAST_MODEL_TYPES = frozenset(
    {"qwen2", "qwen3", "llama", "mistral", "qwen2_moe", "qwen3_moe", "deepseek_v3"}
)
#: The lean loop looks for stop strings in unfinished rows every this many steps.
STOP_CHECK_EVERY = 8
#: Most Gumbel-noise numbers drawn ahead of time per call (rows x steps x vocab).
NOISE_BUDGET = 1 << 22
#: Most decode steps whose noise is drawn at once.
NOISE_CHUNK_STEPS = 32
#: Name under which :func:`decode_attention` is registered with transformers.
DECODE_ATTENTION = "agentgym_decode"


class _SeededSampler:
    """A logits processor that samples each row with its own seed and records log-probs."""

    def __init__(self, seeds: list[int], temperatures: list[float], top_ps: list[float]) -> None:
        self.generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        self.temperatures = temperatures
        self.top_ps = top_ps
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.float()
        b, v = scores.shape
        temps = torch.tensor(self.temperatures, dtype=scores.dtype, device=scores.device)
        greedy = temps == 0
        scaled = scores / torch.where(greedy, torch.ones_like(temps), temps)[:, None]
        if any(p < 1.0 for p in self.top_ps):
            scaled = _top_p_filter(scaled, torch.tensor(self.top_ps, device=scores.device))
        logp = torch.log_softmax(scaled, dim=-1)
        noise = torch.stack([torch.rand(v, generator=g) for g in self.generators]).to(scores.device)
        perturbed = torch.where(greedy[:, None], logp, logp + _gumbel(noise))
        choice = perturbed.argmax(dim=-1)
        self.logprobs.append(logp.gather(1, choice[:, None]).squeeze(1).cpu())
        out = torch.full_like(scores, -math.inf)
        out.scatter_(1, choice[:, None], 0.0)
        return out


def _gumbel(uniform: torch.Tensor) -> torch.Tensor:
    """Gumbel(0, 1) noise from uniform [0, 1) numbers (clamped away from 0 and 1)."""
    return -torch.log(-torch.log(uniform.clamp(1e-20, 1.0 - 1e-7)))


def _top_p_filter(logits: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep, per row, the smallest set of tokens whose probability mass reaches top_p."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(-1)
    mass_before = probs.cumsum(-1) - probs
    drop_sorted = mass_before >= top_p[:, None]
    drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
    return logits.masked_fill(drop, -math.inf)


# ---------------------------------------------------------------------- lean decoding parts
class _RowNoise:
    """Gumbel noise for the rows of a lean decode, each row from its own generator.

    Row ``r``'s noise at step ``t`` is its generator's ``t``-th draw of ``vocab`` uniform
    numbers -- the same numbers the ``generate`` path draws one step at a time -- but the
    draws are made ``chunk`` steps at once and turned into Gumbel noise in one
    vectorised call. Greedy rows draw nothing.
    """

    def __init__(
        self, seeds: Sequence[int], sampled: Sequence[bool], vocab: int, device: torch.device
    ) -> None:
        self.generators = [
            torch.Generator().manual_seed(int(s)) if on else None
            for s, on in zip(seeds, sampled, strict=True)
        ]
        self.vocab = vocab
        self.device = device
        n_sampled = max(1, sum(1 for on in sampled if on))
        self.chunk = max(1, min(NOISE_CHUNK_STEPS, NOISE_BUDGET // (n_sampled * vocab)))
        self._noise: torch.Tensor | None = None  # [batch rows, chunk, vocab]
        self._start = 0  # the step the current chunk starts at

    def step(self, t: int, rows: Sequence[int]) -> torch.Tensor | None:
        """Gumbel noise ``[len(rows), vocab]`` for step ``t`` (rows: request indices);
        ``None`` when every row is greedy."""
        if all(self.generators[r] is None for r in rows):
            return None
        if self._noise is None or t - self._start >= self.chunk:
            uniform = torch.zeros(len(rows), self.chunk, self.vocab)
            for j, r in enumerate(rows):
                g = self.generators[r]
                if g is not None:
                    torch.rand(self.chunk, self.vocab, generator=g, out=uniform[j])
            self._noise = _gumbel(uniform.to(self.device))
            self._start = t
        return self._noise[:, t - self._start]

    def keep(self, index: torch.Tensor) -> None:
        """Keep only these batch positions (rows that left the batch are dropped)."""
        if self._noise is not None:
            self._noise = self._noise.index_select(0, index.to(self._noise.device))


def _growing_kv_layer_class() -> type:
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


def _register_decode_attention() -> None:
    global _registered
    if not _registered:
        from transformers import AttentionInterface

        AttentionInterface.register(DECODE_ATTENTION, decode_attention)
        _registered = True


@contextlib.contextmanager
def _attention_implementation(model: nn.Module, name: str) -> Iterator[None]:
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


def _fast_path_ok(model: nn.Module) -> bool:
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


@contextlib.contextmanager
def merged_lora(model: nn.Module) -> Iterator[bool]:
    """Inside the block, the model computes the adapted function with the LoRA adapter
    folded into its weights; yields whether it could.

    For every peft LoRA layer (``lora.Linear`` and, for MoE experts, ``ParamWrapper``)
    the weight tensor is replaced by a new tensor ``W + delta`` (``delta`` from peft's
    ``get_delta_weight`` summed over the active adapters), so a forward pass runs one
    matmul per adapted layer. On exit the original
    tensors are put back (not un-merged by subtraction, which would not give back the
    same bits). The adapter wrappers are also taken out of the module tree for the
    block (each parent holds the wrapped layer directly) and put back on exit. Memory:
    one extra copy of the adapted weights while the block runs.

    Yields ``False`` and changes nothing when the model has no LoRA layers, is not a
    ``PeftModel``, has a layer kind or option this does not fold (DoRA and other
    variants, LoRA on embeddings or convolutions, LoRA biases), or has sharded weights
    (FSDP2, DeepSpeed ZeRO-3): the adapter then runs as usual.
    """
    try:
        from peft import PeftModel
        from peft.tuners.lora import LoraLayer
        from peft.tuners.lora.layer import Linear as LoraLinear
        from peft.tuners.lora.layer import ParamWrapper
    except ImportError:  # pragma: no cover - peft is a dependency
        yield False
        return
    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    if not layers or not isinstance(model, PeftModel):
        yield False
        return
    plan: list[tuple[nn.Parameter, list[tuple[Any, str]]]] = []
    by_param: dict[int, int] = {}
    for layer in layers:
        if type(layer) not in (LoraLinear, ParamWrapper):
            yield False
            return
        adapters = [a for a in layer.active_adapters if a in layer.lora_A]
        if any(
            a in getattr(layer, "lora_variant", {}) or getattr(layer, "lora_bias", {}).get(a)
            for a in adapters
        ):
            yield False
            return
        if layer.merged:
            yield False
            return
        if isinstance(layer, ParamWrapper):
            param = layer.get_param()
        else:
            param = layer.get_base_layer().weight
        if type(param.data) is not torch.Tensor or hasattr(param, "ds_id"):
            # a sharded parameter (FSDP2 DTensor, DeepSpeed ZeRO-3): leave it alone
            yield False
            return
        if id(param) not in by_param:
            by_param[id(param)] = len(plan)
            plan.append((param, []))
        plan[by_param[id(param)]][1].extend((layer, a) for a in adapters)
    # the outermost adapter wrappers and what they wrap (nested for several parameters)
    swaps = [
        (parent, name, child, child.get_base_layer())
        for parent in model.modules()
        if not isinstance(parent, LoraLayer)
        for name, child in parent.named_children()
        if isinstance(child, LoraLayer)
    ]
    saved: list[tuple[nn.Parameter, torch.Tensor]] = []
    swapped: list[tuple[nn.Module, str, nn.Module]] = []
    try:
        with torch.no_grad():
            for param, parts in plan:
                if not parts:
                    continue
                merged = param.data.clone()
                for layer, adapter in parts:
                    merged += layer.get_delta_weight(adapter).to(merged.dtype)
                saved.append((param, param.data))
                param.data = merged
        # the wrappers would only add Python overhead now: call the wrapped layers
        for parent, name, wrapper, base in swaps:
            setattr(parent, name, base)
            swapped.append((parent, name, wrapper))
        yield True
    finally:
        for parent, name, wrapper in reversed(swapped):
            setattr(parent, name, wrapper)
        for param, original in saved:
            param.data = original


class _DecodeMask:
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

    def to(self, device: torch.device) -> _DecodeMask:
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


# ---------------------------------------------------------------------- the engine
class HFEngine(RolloutEngine):
    """Batched generation on a Hugging Face causal LM (see the module docstring).

    Args:
        model: a causal LM (a ``PeftModel`` while training with LoRA).
        tokenizer: its tokenizer (needs a chat template and an eos token).
        shares_weights: the model object is the trainer's own, so adapter syncs are
            no-ops (the embedded, colocated default). With ``False`` the engine holds a
            separate copy and :meth:`load_adapter` copies weights into it.
        seed: seeds the engine's fallback RNG, used for requests without a seed.
        decode: ``"lean"`` (agentgym's decode loop, default) or ``"generate"``
            (``model.generate``; the reference implementation).
        merge_lora: in the lean loop, fold a LoRA adapter into copies of the weights
            for the duration of a call (:func:`merged_lora`).
        fast_attention: in the lean loop, use the preallocated cache and
            :func:`decode_attention` on models that allow it (:data:`FAST_MODEL_TYPES`).
        fused: with ``fast_attention``, run decode steps through
            :class:`~agentgym.trainers.engines.fused.FusedDecoder` on the Llama-family
            models it supports (the model's ``forward`` otherwise).
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        *,
        shares_weights: bool = True,
        seed: int = 0,
        decode: str = "lean",
        merge_lora: bool = True,
        fast_attention: bool = True,
        fused: bool = True,
    ) -> None:
        super().__init__()
        if decode not in ("lean", "generate"):
            raise ConfigError(f"decode must be 'lean' or 'generate', got {decode!r}.")
        self.model = model
        self.tokenizer = tokenizer
        self.shares_weights = shares_weights
        self.decode = decode
        self.merge_lora = merge_lora
        self.fast_attention = fast_attention
        self.fused = fused
        self._rng = random.Random(seed)
        self.device = next(model.parameters()).device
        self.generated_tokens = 0
        #: decode steps the model ran, and row-steps computed for rows still generating
        #: vs all rows in the batch (their ratio says how much batch compute was used)
        self.decode_steps = 0
        self.row_steps_used = 0
        self.row_steps_total = 0

    def load_adapter(self, weights: Mapping[str, torch.Tensor]) -> None:
        if self.shares_weights:
            return
        from agentgym.trainers.models import load_adapter_state_dict

        load_adapter_state_dict(self.model, weights)

    def _generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        tok = self.tokenizer
        prompts = [encode_prompt(tok, r.messages) for r in requests]
        seeds = [
            r.sampling.seed if r.sampling.seed is not None else self._rng.getrandbits(31)
            for r in requests
        ]
        was_training = self.model.training
        self.model.eval()
        try:
            if self.decode == "generate":
                ids, logprobs = self._decode_generate(requests, prompts, seeds)
            else:
                ids, logprobs = self._decode_lean(requests, prompts, seeds)
        finally:
            if was_training:
                self.model.train()
        return [
            self._finish(ids[i], logprobs[i], r, len(prompts[i])) for i, r in enumerate(requests)
        ]

    def _pad_id(self) -> int:
        tok = self.tokenizer
        return int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)

    def _left_padded(self, prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self._pad_id(), dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attention[i, width - len(p) :] = 1
        return input_ids, attention

    # ------------------------------------------------------------------ generate path
    def _decode_generate(
        self, requests: list[GenerationRequest], prompts: list[list[int]], seeds: list[int]
    ) -> tuple[list[list[int]], list[list[float]]]:
        """``model.generate`` with :class:`_SeededSampler`; rows run to the longest."""
        from transformers import GenerationConfig, LogitsProcessorList

        tok = self.tokenizer
        input_ids, attention = self._left_padded(prompts)
        sampler = _SeededSampler(
            seeds,
            [float(r.sampling.temperature) for r in requests],
            [float(r.sampling.top_p) for r in requests],
        )
        max_new = max(r.sampling.max_tokens for r in requests)
        gen_config = GenerationConfig(
            do_sample=False,
            max_new_tokens=max_new,
            eos_token_id=tok.eos_token_id,
            pad_token_id=self._pad_id(),
            use_cache=True,
        )
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention.to(self.device),
                generation_config=gen_config,
                logits_processor=LogitsProcessorList([sampler]),
            )
        new_tokens = out[:, input_ids.shape[1] :].cpu()
        steps = len(sampler.logprobs)
        self.decode_steps += steps
        self.row_steps_total += steps * len(requests)
        self.row_steps_used += steps * len(requests)
        logprobs = torch.stack(sampler.logprobs, dim=1) if sampler.logprobs else None
        return (
            [new_tokens[i].tolist() for i in range(len(requests))],
            [logprobs[i].tolist() if logprobs is not None else [] for i in range(len(requests))],
        )

    # ------------------------------------------------------------------ lean path
    def _decode_lean(
        self, requests: list[GenerationRequest], prompts: list[list[int]], seeds: list[int]
    ) -> tuple[list[list[int]], list[list[float]]]:
        """agentgym's decode loop (see the module docstring); returns ids and log-probs."""
        merge = merged_lora(self.model) if self.merge_lora else contextlib.nullcontext(False)
        with merge as folded, torch.inference_mode():
            # folded: the peft wrapper has nothing left to do; call the model it wraps
            model = self.model.get_base_model() if folded else self.model
            return self._lean_loop(model, requests, prompts, seeds)

    def _lean_loop(
        self,
        model: nn.Module,
        requests: list[GenerationRequest],
        prompts: list[list[int]],
        seeds: list[int],
    ) -> tuple[list[list[int]], list[list[float]]]:
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        dev, tok = self.device, self.tokenizer
        n = len(requests)
        eos = tok.eos_token_id
        limits = [r.sampling.max_tokens for r in requests]
        temps = torch.tensor([float(r.sampling.temperature) for r in requests])
        top_ps = torch.tensor([float(r.sampling.top_p) for r in requests])
        greedy = temps == 0
        inv_temp = torch.where(greedy, torch.ones_like(temps), temps)
        stops = [tuple(s for s in r.sampling.stop if s) for r in requests]

        # prefill each distinct prompt once, then give every row a copy of its cache
        distinct: dict[tuple[int, ...], int] = {}
        source = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
        input_ids, attention = self._left_padded([list(p) for p in distinct])
        width = input_ids.shape[1]
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=getattr(model, "config", None))
        fast = (
            self.fast_attention
            and _fast_path_ok(model)
            and bool(cache.layers)
            and all(type(layer) is DynamicLayer for layer in cache.layers)
        )
        if fast:
            layer_cls = _growing_kv_layer_class()
            cache.layers = [layer_cls(width + max(limits)) for _ in cache.layers]
        out = model(
            input_ids=input_ids.to(dev),
            attention_mask=attention.to(dev),
            position_ids=positions.to(dev),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        expand = torch.tensor(source, dtype=torch.long)
        logits = out.logits[:, -1].index_select(0, expand.to(dev))
        cache.batch_select_indices(expand.to(dev))
        next_pos = (positions[:, -1:] + 1).index_select(0, expand).to(dev)
        mask = _DecodeMask(
            attention.index_select(0, expand),
            width + max(limits),
            next(model.parameters()).dtype,
            additive=fast,
        ).to(dev)

        rows = list(range(n))  # batch position -> request index
        live = [True] * n  # per batch position: still generating
        ids: list[list[int]] = [[] for _ in range(n)]
        lps: list[list[float]] = [[] for _ in range(n)]
        noise = _RowNoise(seeds, [not bool(g) for g in greedy], logits.shape[-1], dev)
        b_temp = inv_temp.to(dev)
        b_greedy = greedy.to(dev)
        b_top_p = top_ps.to(dev)
        t = 0
        fused = FusedDecoder.build(model, width + max(limits)) if fast and self.fused else None
        attn_ctx = _attention_implementation(model, DECODE_ATTENTION) if fast else None
        if fast:
            _register_decode_attention()
        with attn_ctx if attn_ctx is not None else contextlib.nullcontext():
            while True:
                scaled = logits.float() / b_temp[:, None]
                nucleus = b_top_p < 1.0
                if bool(nucleus.any()):
                    idx = nucleus.nonzero().squeeze(1)
                    scaled[idx] = _top_p_filter(scaled[idx], b_top_p[idx])
                logp = torch.log_softmax(scaled, dim=-1)
                gumbel = noise.step(t, rows)
                perturbed = (
                    logp if gumbel is None else torch.where(b_greedy[:, None], logp, logp + gumbel)
                )
                choice = perturbed.argmax(dim=-1)
                chosen_lp = logp.gather(1, choice[:, None]).squeeze(1)
                t += 1
                self.decode_steps += 1
                self.row_steps_total += len(rows)
                for j, (c, lp) in enumerate(zip(choice.tolist(), chosen_lp.tolist(), strict=True)):
                    if not live[j]:
                        continue
                    r = rows[j]
                    self.row_steps_used += 1
                    ids[r].append(c)
                    lps[r].append(lp)
                    if c == eos or len(ids[r]) >= limits[r]:
                        live[j] = False
                if t % STOP_CHECK_EVERY == 0:
                    for j, r in enumerate(rows):
                        if live[j] and stops[r] and _stopped(tok, ids[r], stops[r]):
                            live[j] = False
                alive = sum(live)
                if alive == 0:
                    break
                # finished rows leave once they are 1/8 of the batch: leaving copies the
                # cache, staying costs a row of compute per step
                if len(rows) - alive >= max(1, len(rows) // 8):
                    keep = torch.tensor([j for j, on in enumerate(live) if on], dtype=torch.long)
                    keep_dev = keep.to(dev)
                    cache.batch_select_indices(keep_dev)
                    noise.keep(keep)
                    rows = [rows[j] for j in keep.tolist()]
                    live = [True] * len(rows)
                    choice, next_pos = choice[keep_dev], next_pos[keep_dev]
                    b_temp, b_greedy, b_top_p = (
                        b_temp[keep_dev],
                        b_greedy[keep_dev],
                        b_top_p[keep_dev],
                    )
                    mask.keep(keep_dev)
                step_mask = mask.next_step()
                if fused is not None:
                    logits = fused.step(choice, next_pos, cache, step_mask)
                else:
                    logits = model(
                        input_ids=choice[:, None],
                        attention_mask=step_mask,
                        position_ids=next_pos,
                        past_key_values=cache,
                        use_cache=True,
                    ).logits[:, -1]
                next_pos = next_pos + 1
        return ids, lps

    def _finish(
        self, ids: list[int], logprobs: list[float], request: GenerationRequest, prompt_len: int
    ) -> Completion:
        completion = finish_completion(self.tokenizer, ids, logprobs, request.sampling, prompt_len)
        self.generated_tokens += completion.num_tokens
        return completion


def _stopped(tokenizer: Any, ids: list[int], stops: tuple[str, ...]) -> bool:
    """Whether the text of ``ids`` already holds a stop string (so the row can end).

    A text ending in an incomplete character (U+FFFD from a partial UTF-8 sequence) is
    not judged yet: the next tokens may change how it decodes.
    """
    text = tokenizer.decode(ids, skip_special_tokens=True)
    if text.endswith("\ufffd"):
        return False
    return first_stop(text, stops) is not None
