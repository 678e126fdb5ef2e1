"""Typed options of each rollout engine: ``rollout.engine_options`` of a trainer config.

A config writes the options as a mapping under the engine it picked::

    rollout:
      engine: vllm
      engine_options: {gpu_memory_utilization: 0.55, tensor_parallel_size: 8}

:func:`engine_options` turns that mapping into the engine's dataclass (unknown names get
"did you mean", bad values a message naming the key), so a typo fails when the config is
loaded, not when the engine starts; the engine factory and the planner read the typed
object, never the raw mapping.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentgym import UnknownNameError, config_check, config_from_dict


@dataclass(frozen=True)
class HFEngineOptions:
    """The embedded engine (:class:`~agentgym.generation.HFEngine`): it generates
    with the trainer's own model object, so adapter syncs cost nothing.

    Attributes:
        decode: ``lean`` (agentgym's own decode loop: one forward per token on a growing
            KV cache, per-row sampling) or ``generate`` (transformers' ``generate``, the
            reference path).
        merge_lora: fold the LoRA weights into the base weights while generating (and
            unfold them after): one matmul per layer instead of three.
        fast_attention: the additive-mask fast path of the decode step.
        fused: the fused one-token decode step for Llama-family models (qkv and
            gate/up as one matmul each).
    """

    decode: str = "lean"
    merge_lora: bool = True
    fast_attention: bool = True
    fused: bool = True

    def __post_init__(self) -> None:
        config_check(
            self.decode in ("lean", "generate"),
            f"rollout.engine_options.decode must be 'lean' or 'generate', got {self.decode!r}.",
        )


@dataclass(frozen=True)
class VLLMEngineOptions:
    """The vLLM engine (GPU, or vLLM's CPU build; colocated, LoRA adapters swapped per step).

    The names and meanings are vLLM's own (``vllm.LLM`` engine arguments) where one exists,
    and those options go to ``vllm.LLM`` under that name.

    Attributes:
        gpu_memory_utilization: share of GPU memory vLLM may take (weights + KV cache);
            the trainer keeps the rest.
        max_model_len: longest prompt + reply (``null``: the model's).
        max_num_seqs: most sequences decoded at once (``null``: vLLM's default).
        kv_cache_memory_bytes: the KV cache's size in bytes (``null``: what
            ``gpu_memory_utilization`` leaves after the weights). On vLLM's CPU build
            ``gpu_memory_utilization`` is a share of the host's memory, so a small run on a
            shared machine sets this instead (the tests use 64 MiB).
        dtype: weights and activations (``auto``: the trainer's, ``model.dtype``, so that
            a float32 trainer is not compared with a bf16 engine).
        kv_cache_dtype: ``auto`` (the model's dtype), ``fp8``, ...
        tensor_parallel_size / pipeline_parallel_size / data_parallel_size: vLLM's
            parallel layout of the rollout engine.
        enable_expert_parallel: shard MoE experts over the tensor x data parallel ranks
            instead of slicing every expert (vLLM's expert parallelism).
        enable_sleep_mode: allow ``sleep``/``wake`` (``null``: on when colocated and vLLM
            has sleep mode on this platform: CUDA and ROCm; vLLM's CPU build has none, so
            there it is off, with a line saying so; ``true`` there is an error).
        sleep_level: 1 (weights to host memory, KV cache dropped) or 2 (weights dropped
            too; reloaded from the base-weights directory at wake: less host memory, a
            slower wake).
        colocated: vLLM shares the GPUs with training.
        enforce_eager: no CUDA graphs (faster start, slower decode).
        enable_prefix_caching: reuse the KV cache of shared prompt prefixes.
        max_lora_rank: the largest adapter rank vLLM reserves for (``null``: the
            adapter's).
        tokenizer_path: a tokenizer directory other than the model's.
        llm_kwargs: any further ``vllm.LLM`` keyword arguments, passed as given.
    """

    gpu_memory_utilization: float = 0.3
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    kv_cache_memory_bytes: int | None = None
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    enable_sleep_mode: bool | None = None
    sleep_level: int = 1
    colocated: bool = True
    enforce_eager: bool = False
    enable_prefix_caching: bool = True
    max_lora_rank: int | None = None
    tokenizer_path: str | None = None
    llm_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = "rollout.engine_options"
        config_check(
            0.0 < self.gpu_memory_utilization <= 1.0,
            f"{where}.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}.",
        )
        config_check(
            self.max_model_len is None or self.max_model_len >= 2,
            f"{where}.max_model_len must be >= 2 or null, got {self.max_model_len}.",
        )
        config_check(
            self.max_num_seqs is None or self.max_num_seqs >= 1,
            f"{where}.max_num_seqs must be >= 1 or null, got {self.max_num_seqs}.",
        )
        config_check(
            self.kv_cache_memory_bytes is None or self.kv_cache_memory_bytes >= 2**20,
            f"{where}.kv_cache_memory_bytes must be at least 1 MiB (1048576) or null, got "
            f"{self.kv_cache_memory_bytes}.",
        )
        for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            config_check(
                getattr(self, name) >= 1, f"{where}.{name} must be >= 1, got {getattr(self, name)}."
            )
        config_check(
            self.sleep_level in (1, 2),
            f"{where}.sleep_level must be 1 or 2, got {self.sleep_level}.",
        )
        config_check(
            self.max_lora_rank is None or self.max_lora_rank >= 1,
            f"{where}.max_lora_rank must be >= 1 or null.",
        )

    @property
    def gpus(self) -> int:
        """GPUs one engine instance spans."""
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size


#: engine name -> its options class
ENGINE_OPTIONS: dict[str, type] = {"hf": HFEngineOptions, "vllm": VLLMEngineOptions}

EngineOptions = HFEngineOptions | VLLMEngineOptions


def engine_options(kind: str, options: Mapping[str, Any] | EngineOptions | None) -> EngineOptions:
    """The typed options of engine ``kind`` from a config mapping (or an options object).

    Raises:
        UnknownNameError: an unknown engine, or an option that engine does not take.
        ConfigError: a bad value.
    """
    if kind not in ENGINE_OPTIONS:
        raise UnknownNameError("rollout engine", kind, tuple(ENGINE_OPTIONS))
    cls = ENGINE_OPTIONS[kind]
    if isinstance(options, cls):
        return options
    if dataclasses.is_dataclass(options):
        raise UnknownNameError(
            "engine options",
            type(options).__name__,
            [c.__name__ for c in ENGINE_OPTIONS.values()],
            hint=f"rollout.engine is {kind!r}: give {cls.__name__}.",
        )
    return config_from_dict(cls, dict(options or {}), "rollout.engine_options")
