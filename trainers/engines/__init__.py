"""Rollout engines: batched generation behind one interface (:class:`RolloutEngine`).

What the rest of agentgym takes from here; the modules inside are the package's own:

* the interface and its batching front-end (:mod:`.base`): :class:`RolloutEngine`,
  :class:`GenerationRequest`, :class:`BatchingPolicy`, :class:`DecodeStats` (how full
  the decode batches were); how a reply ends
  (:func:`finish_completion`, :mod:`.completion`);
* the engines: :class:`HFEngine` (embedded, the trainer's own model: :mod:`.hf`, with
  :mod:`.sampling`, :mod:`.lean`, :mod:`.fast_attention`, :mod:`.fused` and
  :mod:`.lora_fold`) and :class:`VLLMEngine` (GPU or vLLM's CPU build: :mod:`.vllm`, with
  :mod:`.vllm_sampling`; the ``vllm.LLM`` arguments it passes: :func:`vllm_llm_kwargs`,
  and each ``LoRARequest``'s: :func:`lora_request_extras`);
  importing this package never imports vLLM itself;
* choosing one: :func:`make_engine`, :data:`ENGINE_KINDS`, and their typed options
  :class:`HFEngineOptions`, :class:`VLLMEngineOptions` (:func:`engine_options` checks a
  config's mapping; :mod:`.options`);
* LoRA adapters as vLLM files (:mod:`.adapters`): :func:`save_base_model`,
  :func:`write_peft_adapter`, :func:`adapter_config_dict`, :func:`infer_adapter_config`,
  :func:`is_3d_moe_adapter`, :func:`vllm_lora_rank`, :data:`VLLM_LORA_RANKS`; :func:`import_vllm`;
* measuring an engine against the learner: :func:`logprob_mismatch` (:mod:`.mismatch`);
* ``hf:PATH[@ADAPTER]`` policies: :func:`policy_from_spec`, and :func:`resolve_adapter`
  (an adapter named by its folder, checkpoint or run; :mod:`.spec`).
"""

from __future__ import annotations

from agentgym import lazy_exports

#: public name -> the module that defines it. Loaded on first use, so that reading a
#: config (which only needs the options) does not import torch.
_LAZY = {
    "VLLM_LORA_RANKS": "agentgym.trainers.engines.adapters",
    "adapter_config_dict": "agentgym.trainers.engines.adapters",
    "infer_adapter_config": "agentgym.trainers.engines.adapters",
    "is_3d_moe_adapter": "agentgym.trainers.engines.adapters",
    "vllm_refusal": "agentgym.trainers.engines.adapters",
    "save_base_model": "agentgym.trainers.engines.adapters",
    "vllm_lora_rank": "agentgym.trainers.engines.adapters",
    "write_peft_adapter": "agentgym.trainers.engines.adapters",
    "BatchingPolicy": "agentgym.trainers.engines.base",
    "DecodeStats": "agentgym.trainers.engines.base",
    "GenerationRequest": "agentgym.trainers.engines.base",
    "RolloutEngine": "agentgym.trainers.engines.base",
    "finish_completion": "agentgym.trainers.engines.completion",
    "ENGINE_KINDS": "agentgym.trainers.engines.factory",
    "make_engine": "agentgym.trainers.engines.factory",
    "HFEngine": "agentgym.trainers.engines.hf",
    "merged_lora": "agentgym.trainers.engines.lora_fold",
    "logprob_mismatch": "agentgym.trainers.engines.mismatch",
    "EngineOptions": "agentgym.trainers.engines.options",
    "HFEngineOptions": "agentgym.trainers.engines.options",
    "VLLMEngineOptions": "agentgym.trainers.engines.options",
    "engine_options": "agentgym.trainers.engines.options",
    "policy_from_spec": "agentgym.trainers.engines.spec",
    "resolve_adapter": "agentgym.trainers.engines.spec",
    "VLLMEngine": "agentgym.trainers.engines.vllm",
    "import_vllm": "agentgym.trainers.engines.vllm",
    "vllm_llm_kwargs": "agentgym.trainers.engines.vllm",
    "lora_request_extras": "agentgym.trainers.engines.vllm",
    "sampled_logprobs": "agentgym.trainers.engines.vllm_sampling",
    "vllm_sampling_kwargs": "agentgym.trainers.engines.vllm_sampling",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = sorted(_LAZY)
