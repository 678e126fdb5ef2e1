"""One training forward pass: a causal LM's outputs at the positions that predict each
sampled token of a micro-batch (:func:`model_replies`), for the policy's log-probs and
the critic's values alike.

With ``share_prompts``, each distinct prompt of the micro-batch runs through the model
once, filling a KV cache; the cache rows are then copied to the samples that continue
that prompt and the replies run on top of it. Gradients flow back through the copied
cache into the one prompt pass, so loss and gradients are those of the plain layout
(:meth:`~agentgym.trainers.batch.MicroBatch.sequences`, one full row per sample), with
the prompt computed once instead of ``G`` times.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from agentgym.trainers.batch import MicroBatch, TokenRows, positions
from agentgym.trainers.router_replay import RoutingReplay, flat


@contextlib.contextmanager
def _replaying(replay: RoutingReplay | None, routing: Any) -> Iterator[None]:
    """The routers replay ``routing`` (``[layers, B, T, k]``) for one pass."""
    if replay is None:
        yield
        return
    replay.set(flat(routing))
    try:
        yield
    finally:
        replay.set(None)


def model_replies(
    module: Any,
    mb: MicroBatch,
    *,
    hidden: bool,
    share_prompts: bool,
    cache_config: Any,
    replay: RoutingReplay | None = None,
) -> torch.Tensor:
    """``module``'s logits ``[B, R, V]`` (float32), or with ``hidden`` its last hidden
    states ``[B, R, H]`` (the vocabulary projection skipped), at the positions that
    predict each of ``mb``'s sampled tokens. ``replay``: MoE router replay of the
    engine's recorded choices (``mb``'s routing); ``cache_config``: the model config the
    shared-prompt KV cache is laid out for."""
    extra: dict[str, Any] = {"output_hidden_states": True, "logits_to_keep": 1} if hidden else {}

    def pick(out: Any) -> torch.Tensor:
        return out.hidden_states[-1] if hidden else out.logits.float()

    if replay is not None:
        assert mb.prompt_routing is not None and mb.reply_routing is not None
    if not (share_prompts and mb.num_prompts < mb.num_samples):
        input_ids, attention, position_ids = mb.sequences()
        routing = (
            torch.cat([mb.prompt_routing[:, mb.prompt_of], mb.reply_routing], 2)
            if replay is not None
            else None
        )
        with _replaying(replay, routing):
            out = module(
                input_ids=input_ids,
                attention_mask=attention,
                position_ids=position_ids,
                use_cache=False,
                **extra,
            )
        return mb.reply_logits(pick(out))
    from transformers import DynamicCache

    prompt_pos = positions(mb.prompt_mask)
    cache = DynamicCache(config=cache_config)
    with _replaying(replay, mb.prompt_routing):
        out = module(
            input_ids=mb.prompt_ids,
            attention_mask=mb.prompt_mask,
            position_ids=prompt_pos,
            past_key_values=cache,
            use_cache=True,
            **({**extra, "logits_to_keep": 1}),
        )
    first = pick(out)[:, -1:].index_select(0, mb.prompt_of)  # predicts each reply's token 0
    r = mb.targets.shape[1]
    if r == 1:
        return first
    cache.batch_select_indices(mb.prompt_of)
    # the last sampled token predicts nothing that is trained: leave it out
    start = prompt_pos[:, -1:].index_select(0, mb.prompt_of) + 1
    routing = mb.reply_routing[:, :, : r - 1] if replay is not None else None
    with _replaying(replay, routing):
        rest = module(
            input_ids=mb.targets[:, :-1],
            attention_mask=torch.cat(
                [mb.prompt_mask.index_select(0, mb.prompt_of), mb.response_mask[:, :-1]],
                dim=1,
            ),
            position_ids=start + torch.arange(r - 1, device=start.device),
            past_key_values=cache,
            use_cache=True,
            **extra,
        )
    return torch.cat([first, pick(rest)], dim=1)


def labelled_logits(model: Any, rows: TokenRows) -> torch.Tensor:
    """float32 logits ``[N, V]`` at the ``N`` labelled positions of ``rows`` (SFT's
    training pass), in :attr:`TokenRows.targets` order: the rows through the decoder
    without an attention mask (``position_ids`` for packed rows) and the output
    projection only where there is a label (the whole logits for a model that does not
    expose its decoder and head). The caller holds the autocast."""
    get_decoder = getattr(model, "get_decoder", None)
    get_head = getattr(model, "get_output_embeddings", None)
    body = get_decoder() if callable(get_decoder) else None
    head = get_head() if callable(get_head) else None
    keep = rows.labels[:, 1:] != -100
    ids = rows.input_ids
    extra = {} if rows.position_ids is None else {"position_ids": rows.position_ids}
    if body is not None and head is not None:
        hidden = body(input_ids=ids, use_cache=False, **extra).last_hidden_state[:, :-1]
        return head(hidden[keep]).float()
    return model(input_ids=ids, use_cache=False, **extra).logits[:, :-1][keep].float()
