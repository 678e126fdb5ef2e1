"""The embedded rollout engine: Hugging Face ``generate`` on a local model (CPU or GPU).

Sampling is done by agentgym rather than by ``generate``'s own sampler, so that it is

* **per-request reproducible**: each request has its own seed (the rollout derives one
  from the run seed, the task, the sample and the turn); row ``i`` of a batch draws its
  Gumbel noise from its own generator, so a completion does not depend on which other
  requests happened to share its batch, nor on the global RNG;
* **exact about log-probabilities**: the log-probability recorded for each token is
  that of the distribution it was drawn from (temperature and top-p applied), computed
  from the same scores the sampler used.

``generate`` runs greedy on scores that our processor has turned into a one-hot of the
sampled token (Gumbel-max: ``argmax(log p + Gumbel)`` is an exact sample of ``p``).

Per-request ``max_tokens`` may differ within a batch (the batch runs to the longest and
shorter rows are cut); stop strings are applied after generation (the stop string's
tokens are kept in ``token_ids`` so that training sees where the reply ended; the text
excludes it).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from agentgym.trainers.engines.base import GenerationRequest, RolloutEngine
from agentgym.trainers.tokenizer import encode_prompt
from agentgym.types import Completion


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
        gumbel = -torch.log(-torch.log(noise.clamp(1e-20, 1.0 - 1e-7)))
        perturbed = torch.where(greedy[:, None], logp, logp + gumbel)
        choice = perturbed.argmax(dim=-1)
        self.logprobs.append(logp.gather(1, choice[:, None]).squeeze(1).cpu())
        out = torch.full_like(scores, -math.inf)
        out.scatter_(1, choice[:, None], 0.0)
        return out


def _top_p_filter(logits: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep, per row, the smallest set of tokens whose probability mass reaches top_p."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(-1)
    mass_before = probs.cumsum(-1) - probs
    drop_sorted = mass_before >= top_p[:, None]
    drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
    return logits.masked_fill(drop, -math.inf)


class HFEngine(RolloutEngine):
    """Batched generation with ``model.generate``.

    Args:
        model: a causal LM (a ``PeftModel`` while training with LoRA).
        tokenizer: its tokenizer (needs a chat template and an eos token).
        shares_weights: the model object is the trainer's own, so adapter syncs are
            no-ops (the embedded, colocated default). With ``False`` the engine holds a
            separate copy and :meth:`load_adapter` copies weights into it.
        seed: seeds the engine's fallback RNG, used for requests without a seed.
    """

    def __init__(
        self, model: nn.Module, tokenizer: Any, *, shares_weights: bool = True, seed: int = 0
    ) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.shares_weights = shares_weights
        self._rng = random.Random(seed)
        self.device = next(model.parameters()).device
        self.generated_tokens = 0

    def load_adapter(self, weights: Mapping[str, torch.Tensor]) -> None:
        if self.shares_weights:
            return
        from agentgym.trainers.models import load_adapter_state_dict

        load_adapter_state_dict(self.model, weights)

    def _generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        from transformers import GenerationConfig, LogitsProcessorList

        tok = self.tokenizer
        prompts = [encode_prompt(tok, r.messages) for r in requests]
        width = max(len(p) for p in prompts)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attention[i, width - len(p) :] = 1
        seeds = [
            r.sampling.seed if r.sampling.seed is not None else self._rng.getrandbits(31)
            for r in requests
        ]
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
            pad_token_id=pad,
            use_cache=True,
        )
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                out = self.model.generate(
                    input_ids=input_ids.to(self.device),
                    attention_mask=attention.to(self.device),
                    generation_config=gen_config,
                    logits_processor=LogitsProcessorList([sampler]),
                )
        finally:
            if was_training:
                self.model.train()
        new_tokens = out[:, width:].cpu()
        logprobs = torch.stack(sampler.logprobs, dim=1) if sampler.logprobs else None
        completions = []
        for i, r in enumerate(requests):
            completions.append(
                self._finish(
                    new_tokens[i].tolist(),
                    logprobs[i].tolist() if logprobs is not None else [],
                    r,
                    len(prompts[i]),
                )
            )
        return completions

    def _finish(
        self, ids: list[int], logprobs: list[float], request: GenerationRequest, prompt_len: int
    ) -> Completion:
        tok = self.tokenizer
        eos = tok.eos_token_id
        limit = request.sampling.max_tokens
        finish = "length"
        if eos in ids[:limit]:
            n = ids.index(eos) + 1
            finish = "stop"
        else:
            n = min(limit, len(ids))
        ids, logprobs = ids[:n], logprobs[:n]
        text = tok.decode(ids, skip_special_tokens=True)
        if request.sampling.stop:
            cut = _first_stop(text, request.sampling.stop)
            if cut is not None:
                # keep the fewest tokens whose text reaches the end of the stop string
                end = cut[1]
                for k in range(1, len(ids) + 1):
                    if len(tok.decode(ids[:k], skip_special_tokens=True)) >= end:
                        ids, logprobs = ids[:k], logprobs[:k]
                        break
                text, finish = text[: cut[0]], "stop"
        self.generated_tokens += len(ids)
        return Completion(
            text=text,
            token_ids=tuple(ids),
            logprobs=tuple(logprobs),
            finish_reason=finish,
            num_tokens=len(ids),
            prompt_tokens=prompt_len,
        )


def _first_stop(text: str, stops: tuple[str, ...]) -> tuple[int, int] | None:
    """(start, end) of the earliest stop string in text, or None."""
    best = None
    for s in stops:
        if not s:
            continue
        i = text.find(s)
        if i >= 0 and (best is None or i < best[0]):
            best = (i, i + len(s))
    return best
