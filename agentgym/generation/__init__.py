"""agentgym.generation: models served for generation, the rollout engines, and the weight
sync between a learner and an engine.

A layer of its own, between the environments and the trainer: the trainer, the server
(``agentgym serve``), the ``hf:`` policies and the benchmarks generate through it, and it
imports nothing of theirs. The learner does not know which engine exists; an engine does
not know the learner's distribution strategy.

* the engine interface and its batching front-end (:mod:`.base`): :class:`RolloutEngine`,
  :class:`GenerationRequest`, :class:`BatchingPolicy`, :class:`DecodeStats`; how a reply
  ends (:func:`finish_completion`, :mod:`.completion`);
* the engines: :class:`HFEngine` (embedded: generates with the model object it is given;
  :mod:`.hf`, with :mod:`.sampling`, :mod:`.lean`, :mod:`.fast_attention`, :mod:`.fused`,
  :mod:`.lora_fold`) and :class:`VLLMEngine` (vLLM, on a GPU or its CPU build; :mod:`.vllm`,
  :mod:`.vllm_sampling`); importing this package never imports vLLM;
* choosing one: :func:`make_engine`, :data:`ENGINE_KINDS`, their typed options
  :class:`HFEngineOptions`, :class:`VLLMEngineOptions` (:func:`engine_options`; :mod:`.options`);
* LoRA adapters as vLLM reads them (:mod:`.adapters`);
* models as generation opens them (:mod:`.models`: presets, local folders, adapter state),
  where they compute (:mod:`.placement`), prompts as token ids and the in-process tokenizer
  (:mod:`.tokenizer`), an MoE model's routing as the engine saw it (:mod:`.routing`);
* ``hf:PATH[@ADAPTER]`` policies (:func:`policy_from_spec`) and adapters named by folder,
  checkpoint or run (:func:`resolve_adapter`; :mod:`.spec`).
"""

from __future__ import annotations

from agentgym import lazy_exports

#: public name -> the module that defines it. Loaded on first use, so that reading a
#: config (which only needs the options) does not import torch.
_LAZY = {
    "VLLM_LORA_RANKS": "agentgym.generation.adapters",
    "adapter_config_dict": "agentgym.generation.adapters",
    "infer_adapter_config": "agentgym.generation.adapters",
    "is_3d_moe_adapter": "agentgym.generation.adapters",
    "save_base_model": "agentgym.generation.adapters",
    "vllm_lora_rank": "agentgym.generation.adapters",
    "vllm_refusal": "agentgym.generation.adapters",
    "write_peft_adapter": "agentgym.generation.adapters",
    "BatchingPolicy": "agentgym.generation.base",
    "StreamingPolicy": "agentgym.generation.streaming",
    "AdapterShard": "agentgym.generation.sync",
    "AdapterSync": "agentgym.generation.sync",
    "Need": "agentgym.generation.sync",
    "SyncStats": "agentgym.generation.sync",
    "engine_layout": "agentgym.generation.factory",
    "Lockstep": "agentgym.generation.lockstep",
    "ReplicaFailed": "agentgym.generation.lockstep",
    "DecodeStats": "agentgym.generation.base",
    "GenerationRequest": "agentgym.generation.base",
    "RolloutEngine": "agentgym.generation.base",
    "finish_completion": "agentgym.generation.completion",
    "ENGINE_KINDS": "agentgym.generation.factory",
    "make_engine": "agentgym.generation.factory",
    "HFEngine": "agentgym.generation.hf",
    "EngineLayout": "agentgym.generation.layout",
    "Replicas": "agentgym.generation.layout",
    "SINGLE_REPLICA": "agentgym.generation.layout",
    "stage_ranges": "agentgym.generation.layout",
    "merged_lora": "agentgym.generation.lora_fold",
    "PRESETS": "agentgym.generation.model_specs",
    "adapter_state_dict": "agentgym.generation.models",
    "build_preset": "agentgym.generation.models",
    "count_parameters": "agentgym.generation.models",
    "load_adapter_state_dict": "agentgym.generation.models",
    "load_model": "agentgym.generation.models",
    "check_model_folder": "agentgym.generation.model_specs",
    "quiet_hf_loading": "agentgym.generation.models",
    "routed_experts": "agentgym.generation.models",
    "save_model": "agentgym.generation.models",
    "tensors_digest": "agentgym.generation.models",
    "EngineOptions": "agentgym.generation.options",
    "HFEngineOptions": "agentgym.generation.options",
    "VLLMEngineOptions": "agentgym.generation.options",
    "engine_options": "agentgym.generation.options",
    "FLOAT8": "agentgym.generation.placement",
    "place_model": "agentgym.generation.placement",
    "resolve_device": "agentgym.generation.placement",
    "resolve_dtype": "agentgym.generation.placement",
    "RoutingRecorder": "agentgym.generation.routing",
    "moe_routers": "agentgym.generation.routing",
    "router_shape": "agentgym.generation.routing",
    "policy_from_spec": "agentgym.generation.spec",
    "latest_checkpoint": "agentgym.generation.spec",
    "resolve_adapter": "agentgym.generation.spec",
    "build_tokenizer": "agentgym.generation.tokenizer",
    "encode_completion": "agentgym.generation.tokenizer",
    "encode_prompt": "agentgym.generation.tokenizer",
    "VLLMEngine": "agentgym.generation.vllm",
    "import_vllm": "agentgym.generation.vllm_setup",
    "lora_request_extras": "agentgym.generation.vllm_setup",
    "vllm_llm_kwargs": "agentgym.generation.vllm_setup",
    "sampled_logprobs": "agentgym.generation.vllm_sampling",
    "vllm_sampling_kwargs": "agentgym.generation.vllm_sampling",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = sorted(_LAZY)
