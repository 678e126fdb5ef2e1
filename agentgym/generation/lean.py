"""The HF engine's lean decode loop: agentgym's own token loop over a model's forward.

:func:`lean_decode` produces the same tokens for the same seeds as transformers'
``generate`` with :class:`~agentgym.generation.sampling.SeededSampler` (the
reference path it is tested against), at less cost:

* the prompts are prefilled once per distinct prompt (the ``G`` samples of a task
  share one) and the KV cache is copied out to the rows; each step then runs one token
  per row;
* a row leaves the batch as soon as it is finished (eos, its own ``max_tokens``, or a
  stop string), so the others stop paying for it;
* each row's noise is drawn from its generator a chunk of steps at a time
  (:class:`~agentgym.generation.sampling.RowNoise`: the same numbers as one draw
  per step);
* top-p filters only the rows that ask for it;
* on models whose attention allows it, the cache, mask and attention take the fast
  path of :mod:`.fast_attention`, and on Llama-family models the decode step itself is
  :class:`~agentgym.generation.fused.FusedDecoder` (a few fused tensor operations
  per layer instead of the model's general ``forward``).

Stop strings are looked for every :data:`STOP_CHECK_EVERY` steps so that a stopped row
leaves early; the reply is cut at the stop string afterwards
(:func:`~agentgym.generation.completion.finish_completion`). The kept tokens are
the same either way as long as the text of a reply's first tokens is a prefix of the
text of the whole reply (true of byte-level BPE; a tokenizer whose decoding rewrites
spaces around later punctuation could, in rare cases, stop at a stop string that the
full text would not show).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from agentgym.generation.base import DecodeStats, GenerationRequest
from agentgym.generation.completion import first_stop
from agentgym.generation.fast_attention import (
    DECODE_ATTENTION,
    DecodeMask,
    attention_implementation,
    fast_path_ok,
    growing_kv_layer_class,
    register_decode_attention,
)
from agentgym.generation.fused import FusedDecoder
from agentgym.generation.sampling import RowNoise, top_p_filter

if TYPE_CHECKING:
    from agentgym.generation.routing import RoutingRecorder

#: The lean loop looks for stop strings in unfinished rows every this many steps.
STOP_CHECK_EVERY = 8


def pad_id(tokenizer: Any) -> int:
    """The id that pads prompts: the tokenizer's pad token, else its eos token."""
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else tokenizer.eos_token_id)


def left_padded(prompts: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of the prompts, padded on the left to one width."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        attention[i, width - len(p) :] = 1
    return input_ids, attention


def stop_reached(tokenizer: Any, ids: list[int], stops: tuple[str, ...]) -> bool:
    """Whether the text of ``ids`` already holds a stop string (so the row can end).

    A text ending in an incomplete character (U+FFFD from a partial UTF-8 sequence) is
    not judged yet: the next tokens may change how it decodes.
    """
    text = tokenizer.decode(ids, skip_special_tokens=True)
    if text.endswith("\ufffd"):
        return False
    return first_stop(text, stops) is not None


@dataclass
class _Prefill:
    """What the prefill hands the decode loop: the rows' cache, first logits and mask."""

    cache: Any
    logits: torch.Tensor
    next_pos: torch.Tensor
    mask: DecodeMask
    fast: bool
    width: int


def _prefill(
    model: nn.Module,
    tokenizer: Any,
    prompts: Sequence[Sequence[int]],
    longest: int,
    *,
    device: torch.device,
    fast_attention: bool,
    recorder: RoutingRecorder | None,
) -> _Prefill:
    """Prefill each distinct prompt once, then give every row a copy of its cache."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    dev = device
    distinct: dict[tuple[int, ...], int] = {}
    source = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
    input_ids, attention = left_padded([list(p) for p in distinct], pad_id(tokenizer))
    width = input_ids.shape[1]
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=getattr(model, "config", None))
    fast = (
        fast_attention
        and fast_path_ok(model)
        and bool(cache.layers)
        and all(type(layer) is DynamicLayer for layer in cache.layers)
    )
    if fast:
        layer_cls = growing_kv_layer_class()
        cache.layers = [layer_cls(width + longest) for _ in cache.layers]
    out = model(
        input_ids=input_ids.to(dev),
        attention_mask=attention.to(dev),
        position_ids=positions.to(dev),
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    if recorder is not None:
        recorder.prefill(len(distinct), width, source, [len(p) for p in prompts])
    expand = torch.tensor(source, dtype=torch.long)
    logits = out.logits[:, -1].index_select(0, expand.to(dev))
    cache.batch_select_indices(expand.to(dev))
    next_pos = (positions[:, -1:] + 1).index_select(0, expand).to(dev)
    mask = DecodeMask(
        attention.index_select(0, expand),
        width + longest,
        next(model.parameters()).dtype,
        additive=fast,
    ).to(dev)
    return _Prefill(cache, logits, next_pos, mask, fast, width)


@dataclass
class _Batch:
    """The rows still in the decode batch, with their per-row tensors on the device."""

    rows: list[int]  # batch position -> request index
    live: list[bool]  # per batch position: still generating
    next_pos: torch.Tensor
    temp: torch.Tensor
    greedy: torch.Tensor
    top_p: torch.Tensor


def _sample(
    batch: _Batch, logits: torch.Tensor, noise: RowNoise, t: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's next token at step ``t`` and its log-prob (temperature, top-p, noise)."""
    scaled = logits.float() / batch.temp[:, None]
    nucleus = batch.top_p < 1.0
    if bool(nucleus.any()):
        idx = nucleus.nonzero().squeeze(1)
        scaled[idx] = top_p_filter(scaled[idx], batch.top_p[idx])
    logp = torch.log_softmax(scaled, dim=-1)
    gumbel = noise.step(t, batch.rows)
    perturbed = logp if gumbel is None else torch.where(batch.greedy[:, None], logp, logp + gumbel)
    choice = perturbed.argmax(dim=-1)
    chosen_lp = logp.gather(1, choice[:, None]).squeeze(1)
    return choice, chosen_lp


def _append(
    batch: _Batch,
    choice: torch.Tensor,
    chosen_lp: torch.Tensor,
    ids: list[list[int]],
    lps: list[list[float]],
    *,
    eos: int,
    limits: list[int],
    stats: DecodeStats,
) -> None:
    """Count the step in ``stats`` and give each live row its token; a row ends on eos
    or at its ``max_tokens``."""
    stats.decode_steps += 1
    stats.slot_steps += len(limits)
    stats.row_steps_total += len(batch.rows)
    for j, (c, lp) in enumerate(zip(choice.tolist(), chosen_lp.tolist(), strict=True)):
        if not batch.live[j]:
            continue
        r = batch.rows[j]
        stats.row_steps_used += 1
        ids[r].append(c)
        lps[r].append(lp)
        if c == eos or len(ids[r]) >= limits[r]:
            batch.live[j] = False


def _drop_finished(
    batch: _Batch,
    choice: torch.Tensor,
    cache: Any,
    noise: RowNoise,
    mask: DecodeMask,
    dev: torch.device,
) -> torch.Tensor:
    """Take the finished rows out of the batch, the cache, the noise and the mask;
    returns the live rows' last tokens."""
    keep = torch.tensor([j for j, on in enumerate(batch.live) if on], dtype=torch.long)
    keep_dev = keep.to(dev)
    cache.batch_select_indices(keep_dev)
    noise.keep(keep)
    batch.rows = [batch.rows[j] for j in keep.tolist()]
    batch.live = [True] * len(batch.rows)
    choice, batch.next_pos = choice[keep_dev], batch.next_pos[keep_dev]
    batch.temp, batch.greedy, batch.top_p = (
        batch.temp[keep_dev],
        batch.greedy[keep_dev],
        batch.top_p[keep_dev],
    )
    mask.keep(keep_dev)
    return choice


def _end_stopped(
    batch: _Batch, tokenizer: Any, ids: list[list[int]], stops: list[tuple[str, ...]]
) -> None:
    """End the live rows whose text already holds one of their stop strings."""
    for j, r in enumerate(batch.rows):
        if batch.live[j] and stops[r] and stop_reached(tokenizer, ids[r], stops[r]):
            batch.live[j] = False


def _forward(
    model: nn.Module,
    fused_step: FusedDecoder | None,
    choice: torch.Tensor,
    next_pos: torch.Tensor,
    cache: Any,
    step_mask: torch.Tensor,
) -> torch.Tensor:
    """The next logits of every row, through the fused step or the model's forward."""
    if fused_step is not None:
        return fused_step.step(choice, next_pos, cache, step_mask)
    return model(
        input_ids=choice[:, None],
        attention_mask=step_mask,
        position_ids=next_pos,
        past_key_values=cache,
        use_cache=True,
    ).logits[:, -1]


def lean_decode(
    model: nn.Module,
    tokenizer: Any,
    requests: Sequence[GenerationRequest],
    prompts: Sequence[Sequence[int]],
    seeds: Sequence[int],
    *,
    device: torch.device,
    fast_attention: bool = True,
    fused: bool = True,
    stats: DecodeStats | None = None,
    recorder: RoutingRecorder | None = None,
) -> tuple[list[list[int]], list[list[float]]]:
    """Sample a reply to every request with ``model`` (see the module docstring).

    Args:
        model: the causal LM to call (already in eval mode, inside ``inference_mode``).
        tokenizer: gives the eos id (a row ends on it), the pad id and stop-string text.
        requests: the sampling settings of each row.
        prompts: the prompt token ids of each row.
        seeds: each row's sampling seed.
        device: where the model's inputs go.
        fast_attention: use :mod:`.fast_attention` on models that allow it.
        fused: with ``fast_attention``, run decode steps through
            :class:`~agentgym.generation.fused.FusedDecoder` where it applies.
        stats: counters to add this call's steps to.
        recorder: an MoE router recorder to tell which tokens each forward ran (router
            replay); decode steps then go through the model's own forward.

    Returns:
        Per row, the sampled token ids and their log-probs (eos included when sampled;
        capped at the row's ``max_tokens``; stop strings not yet cut).
    """
    stats = stats if stats is not None else DecodeStats()
    dev, tok = device, tokenizer
    n = len(requests)
    eos = tok.eos_token_id
    limits = [r.sampling.max_tokens for r in requests]
    temps = torch.tensor([float(r.sampling.temperature) for r in requests])
    top_ps = torch.tensor([float(r.sampling.top_p) for r in requests])
    greedy = temps == 0
    inv_temp = torch.where(greedy, torch.ones_like(temps), temps)
    stops = [tuple(s for s in r.sampling.stop if s) for r in requests]
    pre = _prefill(
        model,
        tok,
        prompts,
        max(limits),
        device=dev,
        fast_attention=fast_attention,
        recorder=recorder,
    )
    cache, logits, mask, fast = pre.cache, pre.logits, pre.mask, pre.fast

    ids: list[list[int]] = [[] for _ in range(n)]
    lps: list[list[float]] = [[] for _ in range(n)]
    noise = RowNoise(seeds, [not bool(g) for g in greedy], logits.shape[-1], dev)
    batch = _Batch(
        list(range(n)), [True] * n, pre.next_pos, inv_temp.to(dev), greedy.to(dev), top_ps.to(dev)
    )
    t = 0
    use_fused = fast and fused and recorder is None
    fused_step = FusedDecoder.build(model, pre.width + max(limits)) if use_fused else None
    attn_ctx = attention_implementation(model, DECODE_ATTENTION) if fast else None
    if fast:
        register_decode_attention()
    clock = time.perf_counter()
    with attn_ctx if attn_ctx is not None else contextlib.nullcontext():
        while True:
            active = sum(batch.live)  # rows that generate a token at this step
            choice, chosen_lp = _sample(batch, logits, noise, t)
            t += 1
            _append(batch, choice, chosen_lp, ids, lps, eos=eos, limits=limits, stats=stats)
            if t % STOP_CHECK_EVERY == 0:
                _end_stopped(batch, tok, ids, stops)
            alive = sum(batch.live)
            if alive == 0:
                _time_step(stats, clock, active, n)
                break
            # finished rows leave once they are 1/8 of the batch: leaving copies the
            # cache, staying costs a row of compute per step
            if len(batch.rows) - alive >= max(1, len(batch.rows) // 8):
                choice = _drop_finished(batch, choice, cache, noise, mask, dev)
            logits = _forward(model, fused_step, choice, batch.next_pos, cache, mask.next_step())
            if recorder is not None:
                recorder.step(batch.rows, batch.live)
            batch.next_pos = batch.next_pos + 1
            clock = _time_step(stats, clock, active, n)
    return ids, lps


def _time_step(stats: DecodeStats, since: float, active: int, rows: int) -> float:
    """Add one decode step's seconds to ``stats`` (and to its tail time when fewer than
    half of the call's ``rows`` generated at it); returns the time now."""
    now = time.perf_counter()
    stats.decode_s += now - since
    if 2 * active < rows:
        stats.tail_s += now - since
    return now
