"""Rollout engines: batched generation behind one interface (:class:`RolloutEngine`).

What the rest of agentgym takes from here; the modules inside are the package's own:

* the interface and its batching front-end (:mod:`.base`): :class:`RolloutEngine`,
  :class:`GenerationRequest`, :class:`BatchingPolicy`; how a reply ends
  (:func:`finish_completion`, :mod:`.completion`);
* the engines: :class:`HFEngine` (embedded, the trainer's own model: :mod:`.hf`, with
  :mod:`.sampling`, :mod:`.lean`, :mod:`.fast_attention`, :mod:`.fused` and
  :mod:`.lora_fold`) and :class:`VLLMEngine` (GPU, colocated: :mod:`.vllm`, with
  :mod:`.vllm_sampling`; the ``vllm.LLM`` arguments it passes: :func:`vllm_llm_kwargs`);
  importing this package never imports vLLM itself;
* choosing one: :func:`make_engine`, :data:`ENGINE_KINDS`, and their typed options
  :class:`HFEngineOptions`, :class:`VLLMEngineOptions` (:func:`engine_options` checks a
  config's mapping; :mod:`.options`);
* LoRA adapters as vLLM files (:mod:`.adapters`): :func:`save_base_model`,
  :func:`write_peft_adapter`, :func:`adapter_config_dict`, :func:`infer_adapter_config`,
  :func:`vllm_lora_rank`, :data:`VLLM_LORA_RANKS`; :func:`import_vllm`;
* measuring an engine against the learner: :func:`logprob_mismatch` (:mod:`.mismatch`);
* ``hf:PATH[@ADAPTER]`` policies: :func:`policy_from_spec` (:mod:`.spec`).
"""

from __future__ import annotations

from agentgym.trainers.engines.adapters import (
    VLLM_LORA_RANKS,
    adapter_config_dict,
    infer_adapter_config,
    save_base_model,
    vllm_lora_rank,
    write_peft_adapter,
)
from agentgym.trainers.engines.base import BatchingPolicy, GenerationRequest, RolloutEngine
from agentgym.trainers.engines.completion import finish_completion
from agentgym.trainers.engines.factory import ENGINE_KINDS, make_engine
from agentgym.trainers.engines.hf import HFEngine
from agentgym.trainers.engines.lora_fold import merged_lora
from agentgym.trainers.engines.mismatch import logprob_mismatch
from agentgym.trainers.engines.options import (
    EngineOptions,
    HFEngineOptions,
    VLLMEngineOptions,
    engine_options,
)
from agentgym.trainers.engines.spec import policy_from_spec
from agentgym.trainers.engines.vllm import VLLMEngine, import_vllm, vllm_llm_kwargs
from agentgym.trainers.engines.vllm_sampling import sampled_logprobs, vllm_sampling_kwargs

__all__ = [
    "ENGINE_KINDS",
    "VLLM_LORA_RANKS",
    "BatchingPolicy",
    "EngineOptions",
    "GenerationRequest",
    "HFEngine",
    "HFEngineOptions",
    "RolloutEngine",
    "VLLMEngine",
    "VLLMEngineOptions",
    "adapter_config_dict",
    "engine_options",
    "finish_completion",
    "import_vllm",
    "infer_adapter_config",
    "logprob_mismatch",
    "make_engine",
    "merged_lora",
    "policy_from_spec",
    "sampled_logprobs",
    "save_base_model",
    "vllm_llm_kwargs",
    "vllm_lora_rank",
    "vllm_sampling_kwargs",
    "write_peft_adapter",
]
