"""Engine vs trainer log-probs of the same sampled tokens: ``charts/logprob_mismatch``.

An engine records the log-prob of each token it samples; the learner recomputes them
with its own model. :func:`logprob_mismatch` measures the difference outside the loop,
the way the learner does, for any engine's completions (the HF engine in bf16, vLLM):
the benchmark of :mod:`agentgym.benchmarks.perf.vllm_engine` and the vLLM engine's
tests report it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from agentgym import Completion
from agentgym.generation import GenerationRequest, encode_prompt


def logprob_mismatch(
    model: nn.Module,
    tokenizer: Any,
    requests: Sequence[GenerationRequest],
    completions: Sequence[Completion],
    *,
    temperature: float,
    micro_batch_size: int = 16,
) -> dict[str, float]:
    """Engine vs trainer log-probs of the same sampled tokens, as the learner measures it.

    The completions' tokens are scored by ``model`` (the trainer's model, adapter
    included) at ``temperature`` through the learner's own path (``Sample`` ->
    micro-batches -> ``selected_logprobs``), and compared with the engine's
    ``Completion.logprobs``. ``mean_abs`` is what the trainer logs as
    ``charts/logprob_mismatch``.

    Returns:
        ``mean_abs``, ``max_abs``, ``mean_signed`` (trainer - engine) and ``tokens``.
    """
    from agentgym.trainers.algorithm import selected_logprobs
    from agentgym.trainers.batch import Sample, make_microbatches

    samples = [
        Sample(
            tuple(encode_prompt(tokenizer, r.messages)) + tuple(r.prefix),  # T-PPO: continued
            tuple(c.token_ids),
            0.0,
            i,
            sampler_logprobs=tuple(c.logprobs),
        )
        for i, (r, c) in enumerate(zip(requests, completions, strict=True))
        if c.token_ids and len(c.logprobs) == len(c.token_ids)
    ]
    if not samples:
        return {"mean_abs": math.nan, "max_abs": math.nan, "mean_signed": math.nan, "tokens": 0.0}
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    device = next(model.parameters()).device
    diffs = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for mb in make_microbatches(samples, micro_batch_size, pad):
                mb = mb.to(device)
                input_ids, attention, position_ids = mb.sequences()
                logits = model(
                    input_ids=input_ids, attention_mask=attention, position_ids=position_ids
                ).logits
                logp = selected_logprobs(mb.reply_logits(logits).float(), mb.targets, temperature)
                has = mb.has_sampler_logprobs & (mb.loss_mask > 0)
                diffs.append((logp - mb.sampler_logprobs)[has].cpu())
    finally:
        if was_training:
            model.train()
    d = torch.cat(diffs).double()
    return {
        "mean_abs": float(d.abs().mean()),
        "max_abs": float(d.abs().max()),
        "mean_signed": float(d.mean()),
        "tokens": float(d.numel()),
    }
