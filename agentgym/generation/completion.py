"""How generated token ids become a :class:`~agentgym.Completion`: eos, token caps, stop strings.

Every engine hands its raw ids and log-probs to :func:`finish_completion`, so a reply
ends the same way whichever engine produced it (the HF engine's conventions; the vLLM
engine is tested against them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentgym import Completion, SamplingParams


def finish_completion(
    tokenizer: Any,
    ids: Sequence[int],
    logprobs: Sequence[float],
    sampling: SamplingParams,
    prompt_len: int,
    *,
    eos_ids: Sequence[int] | None = None,
    engine_finish: str | None = None,
) -> Completion:
    """Turn generated ids into a :class:`Completion` with the HF engine's conventions.

    * generation that produced an eos token ends there, the eos id kept in ``token_ids``
      (finish ``"stop"``); otherwise ids are capped at ``max_tokens`` (``"length"``);
    * a stop string ends the text (excluded) and ``token_ids`` keep the fewest tokens whose
      text reaches the stop string's end (``"stop"``);
    * the text is decoded by ``tokenizer`` without special tokens.

    Args:
        eos_ids: the ids that end a reply (default: the tokenizer's eos token).
        engine_finish: what the engine reported; used only when neither an eos token nor a
            stop string explains an early end (for example vLLM's context-length limit).
    """
    eos = set(eos_ids) if eos_ids is not None else {tokenizer.eos_token_id}
    limit = sampling.max_tokens
    ids, logprobs = list(ids[:limit]), list(logprobs[:limit])
    finish = "length"
    cut = next((i for i, t in enumerate(ids) if t in eos), None)
    if cut is not None:
        ids, logprobs = ids[: cut + 1], logprobs[: cut + 1]
        finish = "stop"
    elif len(ids) < limit and engine_finish:
        finish = engine_finish
    text = tokenizer.decode(ids, skip_special_tokens=True)
    if sampling.stop:
        hit = first_stop(text, sampling.stop)
        if hit is not None:
            end = hit[1]
            for k in range(1, len(ids) + 1):
                if len(tokenizer.decode(ids[:k], skip_special_tokens=True)) >= end:
                    ids, logprobs = ids[:k], logprobs[:k]
                    break
            text, finish = text[: hit[0]], "stop"
    return Completion(
        text=text,
        token_ids=tuple(ids),
        logprobs=tuple(logprobs),
        finish_reason=finish,
        num_tokens=len(ids),
        prompt_tokens=prompt_len,
    )


def first_stop(text: str, stops: Sequence[str]) -> tuple[int, int] | None:
    """(start, end) of the earliest stop string in text, or None."""
    best = None
    for s in stops:
        if not s:
            continue
        i = text.find(s)
        if i >= 0 and (best is None or i < best[0]):
            best = (i, i + len(s))
    return best
