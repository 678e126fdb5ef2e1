"""Requests to vLLM and results back: sampling parameters out, sampled log-probs in.

:func:`vllm_sampling_kwargs` translates one agentgym request (its
:class:`~agentgym.SamplingParams` and seed) into ``vllm.SamplingParams`` keywords;
:func:`sampled_logprobs` reads the log-prob of each sampled token off vLLM's output. The
engine is built with ``logprobs_mode="processed_logprobs"``, so those log-probs are
under the distribution the tokens were drawn from (temperature and top-p applied).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentgym import SamplingParams


def vllm_sampling_kwargs(sampling: SamplingParams, seed: int) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams`` for one agentgym request.

    One completion, the request's temperature (0: greedy), top-p, token cap and stop
    strings, its own seed, and ``logprobs=0``: the log-prob of the sampled token only
    (with the engine's ``processed_logprobs`` mode, under the sampling distribution).
    Special tokens are left out of vLLM's text and stop strings are not included in it.
    """
    return {
        "n": 1,
        "temperature": float(sampling.temperature),
        "top_p": float(sampling.top_p),
        "max_tokens": int(sampling.max_tokens),
        "stop": list(sampling.stop) or None,
        "seed": int(seed),
        "logprobs": 0,
        "skip_special_tokens": True,
        "include_stop_str_in_output": False,
    }


def sampled_logprobs(token_ids: Sequence[int], logprobs: Any) -> list[float]:
    """The log-prob of each sampled token from vLLM's per-position logprobs.

    ``logprobs`` is vLLM's ``SampleLogprobs``: one ``{token_id: Logprob}`` mapping per
    generated position (a list of dicts, or vLLM's ``FlatLogprobs``, which indexes the
    same way).
    """
    if logprobs is None:
        raise RuntimeError(
            "vLLM returned no logprobs; the engine asks for logprobs=0 on every request, so "
            "this vLLM build ignores it."
        )
    if len(logprobs) != len(token_ids):
        raise RuntimeError(
            f"vLLM returned {len(logprobs)} logprob positions for {len(token_ids)} tokens."
        )
    out = []
    for i, tok in enumerate(token_ids):
        position = logprobs[i]
        entry = position.get(int(tok)) if position is not None else None
        if entry is None:
            raise RuntimeError(f"vLLM's logprobs at position {i} lack the sampled token {tok}.")
        out.append(float(getattr(entry, "logprob", entry)))
    return out
