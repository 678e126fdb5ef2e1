"""The embedded rollout engine: batched generation on a local Hugging Face model (CPU or GPU).

:class:`HFEngine` generates with the trainer's own model object (``shares_weights``:
adapter syncs cost nothing). Its pieces live next to it:

* sampling (:mod:`.sampling`): per-request seeded Gumbel-max draws, top-p, and the
  log-prob of each token under the distribution it was drawn from;
* two decode paths that produce the same tokens for the same seeds (its
  :class:`~agentgym.generation.options.HFEngineOptions` pick one):

  - ``decode="lean"`` (default): agentgym's own loop over the model's forward
    (:mod:`.lean`; its fast path in :mod:`.fast_attention` and :mod:`.fused`), with a
    LoRA adapter folded into the weights for the duration of a call
    (:mod:`.lora_fold`, ``merge_lora``);
  - ``decode="generate"``: ``model.generate`` with a logits processor that samples the
    same way (:class:`~agentgym.generation.sampling.SeededSampler`); every row
    runs until the longest is done. Kept as the reference implementation the lean loop
    is tested against.

* how a reply ends (:mod:`.completion`): the eos token is kept in ``token_ids``; a stop
  string ends the text (which excludes it) while ``token_ids`` keep the tokens that
  reach it, so that training sees where the reply ended.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from agentgym import Completion, ConfigError
from agentgym.generation.base import GenerationRequest, RolloutEngine
from agentgym.generation.completion import finish_completion
from agentgym.generation.lean import lean_decode, left_padded, pad_id
from agentgym.generation.lora_fold import merged_lora
from agentgym.generation.options import HFEngineOptions
from agentgym.generation.routing import RoutingRecorder
from agentgym.generation.sampling import SeededSampler
from agentgym.generation.tokenizer import encode_prompt


class HFEngine(RolloutEngine):
    """Batched generation on a Hugging Face causal LM (see the module docstring).

    Args:
        model: a causal LM (a ``PeftModel`` while training with LoRA).
        tokenizer: its tokenizer (needs a chat template and an eos token).
        options: how to decode (:class:`HFEngineOptions`: ``decode``, ``merge_lora``,
            ``fast_attention``, ``fused``); default ``HFEngineOptions()``.
        shares_weights: the model object is the trainer's own, so adapter syncs are
            no-ops (the embedded, colocated default). With ``False`` the engine holds a
            separate copy and :meth:`load_adapter` copies weights into it.
        seed: seeds the engine's fallback RNG, used for requests without a seed.

    Attributes:
        generated_tokens: tokens generated over all calls.
        decode_stats: decode steps, row-steps, tokens and tail time (see
            :class:`~agentgym.generation.base.DecodeStats`).
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        options: HFEngineOptions | None = None,
        *,
        shares_weights: bool = True,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.options = options if options is not None else HFEngineOptions()
        self.shares_weights = shares_weights
        self._rng = random.Random(seed)
        self.generated_tokens = 0
        #: attach each router's expert choices to the completions (MoE router replay;
        #: the trainer turns it on with ``algorithm.router_replay``; lean decode only)
        self.record_routing = False

    @property
    def device(self) -> torch.device:
        """Where the model's weights are now (read at each call: the trainer's mesh
        learner builds the engine on a meta model and fills it in later)."""
        return next(self.model.parameters()).device

    # ------------------------------------------------------------------ settings

    @property
    def decode(self) -> str:
        """``"lean"`` or ``"generate"`` (see the module docstring)."""
        return self.options.decode

    @property
    def merge_lora(self) -> bool:
        """Fold a LoRA adapter into the weights while the lean loop runs."""
        return self.options.merge_lora

    @property
    def fast_attention(self) -> bool:
        """Use the lean loop's fast path on models that allow it."""
        return self.options.fast_attention

    @property
    def fused(self) -> bool:
        """Run the lean loop's decode steps fused on the Llama-family models."""
        return self.options.fused

    @property
    def decode_steps(self) -> int:
        """Decode steps the model ran."""
        return self.decode_stats.decode_steps

    @property
    def row_steps_used(self) -> int:
        """Row-steps computed for rows still generating."""
        return self.decode_stats.row_steps_used

    @property
    def row_steps_total(self) -> int:
        """Row-steps computed for all rows of the batches."""
        return self.decode_stats.row_steps_total

    # ------------------------------------------------------------------ the interface

    def load_adapter(
        self, weights: Mapping[str, torch.Tensor], experts: range | None = None
    ) -> None:
        """Copy these adapter weights into the model (nothing to do when it is shared)."""
        if self.shares_weights:
            return
        if experts is not None:
            raise ConfigError("the HF engine serves every expert: hand it whole adapter tensors.")
        from agentgym.generation.models import load_adapter_state_dict

        load_adapter_state_dict(self.model, weights)

    def _generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        tok = self.tokenizer
        # a request's prefix (the reply so far) is context after its prompt
        prompts = [list(encode_prompt(tok, r.messages)) + list(r.prefix) for r in requests]
        seeds = [
            r.sampling.seed if r.sampling.seed is not None else self._rng.getrandbits(31)
            for r in requests
        ]
        was_training = self.model.training
        self.model.eval()
        recorder = RoutingRecorder(self.model, len(requests)) if self.record_routing else None
        try:
            if self.decode == "generate":
                if recorder is not None:
                    raise ConfigError(
                        "router replay records the experts in the lean decode loop: set "
                        "rollout.engine_options.decode=lean (or turn algorithm.router_replay off)."
                    )
                ids, logprobs = self._decode_generate(requests, prompts, seeds)
            else:
                ids, logprobs = self._decode_lean(requests, prompts, seeds, recorder)
        finally:
            if was_training:
                self.model.train()
        done = [
            self._finish(ids[i], logprobs[i], r, len(prompts[i])) for i, r in enumerate(requests)
        ]
        if recorder is not None:
            done = [
                dataclasses.replace(c, routing=recorder.routing(i, len(c.token_ids)))
                for i, c in enumerate(done)
            ]
        return done

    # ------------------------------------------------------------------ decode paths

    def _decode_generate(
        self, requests: list[GenerationRequest], prompts: list[list[int]], seeds: list[int]
    ) -> tuple[list[list[int]], list[list[float]]]:
        """``model.generate`` with :class:`SeededSampler`; rows run to the longest."""
        from transformers import GenerationConfig, LogitsProcessorList

        tok = self.tokenizer
        input_ids, attention = left_padded(prompts, pad_id(tok))
        sampler = SeededSampler(
            seeds,
            [float(r.sampling.temperature) for r in requests],
            [float(r.sampling.top_p) for r in requests],
            device=self.device,
        )
        max_new = max(r.sampling.max_tokens for r in requests)
        gen_config = GenerationConfig(
            do_sample=False,
            max_new_tokens=max_new,
            eos_token_id=tok.eos_token_id,
            pad_token_id=pad_id(tok),
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
        self.decode_stats.decode_steps += steps
        self.decode_stats.row_steps_total += steps * len(requests)
        self.decode_stats.slot_steps += steps * len(requests)
        # every row runs to the longest; a row's own tokens end at its eos
        for row, r in zip(new_tokens.tolist(), requests, strict=True):
            end = next((k + 1 for k, t in enumerate(row) if t == tok.eos_token_id), len(row))
            self.decode_stats.row_steps_used += min(end, r.sampling.max_tokens)
        logprobs = torch.stack(sampler.logprobs, dim=1) if sampler.logprobs else None
        return (
            [new_tokens[i].tolist() for i in range(len(requests))],
            [logprobs[i].tolist() if logprobs is not None else [] for i in range(len(requests))],
        )

    def _decode_lean(
        self,
        requests: list[GenerationRequest],
        prompts: list[list[int]],
        seeds: list[int],
        recorder: RoutingRecorder | None = None,
    ) -> tuple[list[list[int]], list[list[float]]]:
        """The lean loop (:func:`~agentgym.generation.lean.lean_decode`), with the
        adapter folded into the weights when ``merge_lora`` allows."""
        merge = merged_lora(self.model) if self.merge_lora else contextlib.nullcontext(False)
        hooks = recorder if recorder is not None else contextlib.nullcontext()
        with merge as folded, torch.inference_mode(), hooks:
            # folded: the peft wrapper has nothing left to do; call the model it wraps
            model = self.model.get_base_model() if folded else self.model
            return lean_decode(
                model,
                self.tokenizer,
                requests,
                prompts,
                seeds,
                device=self.device,
                fast_attention=self.fast_attention,
                fused=self.fused,
                stats=self.decode_stats,
                recorder=recorder,
            )

    def _finish(
        self, ids: list[int], logprobs: list[float], request: GenerationRequest, prompt_len: int
    ) -> Completion:
        completion = finish_completion(self.tokenizer, ids, logprobs, request.sampling, prompt_len)
        self.generated_tokens += completion.num_tokens
        return completion
