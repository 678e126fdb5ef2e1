"""The vLLM rollout engine: colocated with training, LoRA adapters per step, sleep/wake.

:class:`VLLMEngine` is a :class:`~agentgym.trainers.engines.base.RolloutEngine` that
generates with `vLLM <https://docs.vllm.ai>`_ (``vllm.LLM``, offline mode) on the same
GPU(s) as the trainer. It is installed by the ``vllm`` extra
(``pip install 'agentgym[vllm]'``, CUDA machines only) and imported lazily: importing
this module never imports vLLM.

**Colocation.** The trainer and vLLM share the devices and take turns (all-sync, strictly
on-policy). vLLM gets a fixed share of GPU memory (``gpu_memory_utilization``, default
0.3: weights + KV cache), the trainer keeps the rest. With ``enable_sleep_mode`` (the
default when colocated) :meth:`VLLMEngine.sleep` puts vLLM to sleep at level 1 before the
training phase -- its weights are copied to CPU memory and its KV cache is discarded, so
the learner can use that GPU memory -- and :meth:`VLLMEngine.wake` brings it back before
the next rollout (``torch.cuda.empty_cache()`` first, so the trainer's cached blocks are
returned to the driver). A ``generate`` while asleep wakes the engine first.

**Adapters per step, never full weights.** vLLM loads the *base* weights once, from a
local Hugging Face directory (:func:`save_base_model` writes one from the trainer's model,
LoRA layers stripped). After each update the loop calls :meth:`VLLMEngine.load_adapter`
with the adapter's state dict (peft names, :func:`~agentgym.trainers.models.
adapter_state_dict`); the engine writes it in peft format (``adapter_config.json`` +
``adapter_model.safetensors``, :func:`write_peft_adapter`) to a fresh directory (under
``/dev/shm`` when it exists) and the next generations use a *new*
``LoRARequest(name, id, path)``: vLLM identifies adapters by name and integer id and
caches them, so reusing an id would keep serving the old weights. vLLM loads the new
adapter lazily, on the first generation that asks for it; ``max_loras=1`` and
``max_cpu_loras=1`` make it evict the previous one, whose directory is deleted at once.
Stock vLLM 0.32 has no in-memory tensor ``LoRARequest`` (verl and ms-swift monkeypatch
vLLM's LoRA manager for that); a small adapter written to tmpfs costs milliseconds. After
a wake the current adapter is re-issued under a new id as well, so a LoRA slot whose
state did not survive the sleep can never be used (a silent corruption of that kind was
reported against vLLM's level-1 sleep with LoRA). The adapter's config (rank, alpha,
targets) comes from the peft config given to the constructor
(:func:`adapter_config_dict` turns a ``PeftModel`` or ``LoraConfig`` into it), or is
inferred from the weights' shapes plus ``lora_alpha`` (:func:`infer_adapter_config`).

**Log-probs of the sampling distribution.** The engine is built with
``logprobs_mode="processed_logprobs"``: the returned log-prob of each sampled token is
computed *after* temperature and top-p/top-k, i.e. under the distribution the token was
drawn from (vLLM's default, ``raw_logprobs``, is the model's untempered distribution).
Each request asks for ``logprobs=0``: only the sampled token's log-prob. These fill
``Completion.logprobs``; the learner recomputes log-probs at the same temperature and logs
``charts/logprob_mismatch`` = mean ``|trainer - engine|`` over the tokens that have engine
log-probs (:func:`logprob_mismatch` computes the same number outside the loop). The
learner applies temperature but not top-p, so with ``top_p < 1`` that chart also carries
the truncation.

**Prompts and completions match the HF engine's conventions.** Prompts are tokenised by
agentgym (:func:`~agentgym.trainers.tokenizer.encode_prompt`, the project's chat
template) and passed to vLLM as token ids, so engine and trainer see the same tokens.
Each request keeps its own seed (a request without one gets one from the engine's RNG),
so a completion does not depend on the global RNG. Completions follow
:class:`~agentgym.trainers.engines.hf.HFEngine`: the eos token is kept in ``token_ids``
when generation stopped on it; a stop string ends the text (which excludes it) while
``token_ids`` keep the fewest tokens that reach the stop string's end; the text is decoded
by agentgym's tokenizer (:func:`finish_completion`).

**What is not tested without a GPU.** The development machines have no GPU and cannot
install vLLM. Everything that does not need vLLM is unit-tested on CPU (the peft-format
writer round trip, base-model saving, sampling-parameter translation, completion
finishing against the HF engine, log-prob extraction, the mismatch measure, the
missing-vLLM error). The engine itself -- vLLM's acceptance of the adapter files, LoRA on
the tiny models, sleep/wake, per-request seeds, the log-prob mismatch -- is covered by the
``gpu``-marked tests in ``tests/trainers/test_vllm_engine.py`` and by
``python -m agentgym.benchmarks.perf.vllm_engine``, which run only where CUDA and vLLM
are present. LoRA on fused MoE expert parameters (peft ``target_parameters``, used for
``tiny-deepseek-v3``) depends on vLLM's MoE-LoRA loader reading peft's nested layout
(``experts.base_layer`` = ``gate_up_proj``, ``experts`` = ``down_proj``); it has not been
run. See ``docs/vllm.md``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import random
import shutil
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentgym import Completion, ConfigError, SamplingParams
from agentgym.trainers.engines.base import GenerationRequest, RolloutEngine, finish_completion
from agentgym.trainers.tokenizer import encode_prompt

#: The message raised when vLLM is missing (tests match on the install hint).
VLLM_MISSING = (
    "vLLM is not installed in this environment. The vLLM rollout engine needs it: install "
    "the vllm extra: pip install 'agentgym[vllm]' on a CUDA machine (vllm 0.32, which "
    "pins torch 2.13.0); or use the embedded engine (rollout.engine: hf)."
)

#: LoRA ranks vLLM accepts for ``max_lora_rank`` (its ``MaxLoRARanks``).
VLLM_LORA_RANKS: tuple[int, ...] = (1, 8, 16, 32, 64, 128, 256, 320, 512)

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def import_vllm() -> Any:
    """Import and return the ``vllm`` module, or raise :class:`ConfigError` saying how to
    install it."""
    try:
        import vllm
    except ImportError as e:
        raise ConfigError(VLLM_MISSING) from e
    return vllm


# ---------------------------------------------------------------------------- adapters


def adapter_config_dict(source: Any, adapter_name: str = "default") -> dict[str, Any]:
    """The peft ``adapter_config.json`` content for a ``PeftModel``, a peft ``LoraConfig``
    or an already-made mapping.

    The config is serialised by peft itself (``PeftConfig.save_pretrained``), so the file
    the engine writes is the one ``PeftModel.save_pretrained`` would write.
    """
    if isinstance(source, Mapping):
        config = dict(source)
    else:
        peft_config = getattr(source, "peft_config", None)
        if isinstance(peft_config, Mapping):
            if adapter_name not in peft_config:
                raise ConfigError(
                    f"the peft model has no adapter {adapter_name!r} "
                    f"(it has {sorted(peft_config)})."
                )
            peft_config = peft_config[adapter_name]
        elif peft_config is None:
            peft_config = source
        if not hasattr(peft_config, "save_pretrained"):
            raise ConfigError(
                "adapter_config must be a peft model, a peft LoraConfig or a mapping with "
                f"the adapter_config.json fields; got {type(source).__name__}."
            )
        with tempfile.TemporaryDirectory(prefix="agentgym-peft-config-") as tmp:
            peft_config.save_pretrained(tmp)
            config = json.loads((Path(tmp) / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    _check_adapter_config(config)
    return config


def _check_adapter_config(config: Mapping[str, Any]) -> None:
    peft_type = str(config.get("peft_type", "LORA")).upper()
    if peft_type != "LORA":
        raise ConfigError(f"the vLLM engine serves LoRA adapters only; got peft_type {peft_type}.")
    r = config.get("r")
    if not isinstance(r, int) or r < 1:
        raise ConfigError(f"adapter config needs an integer rank r >= 1; got {r!r}.")
    if config.get("lora_alpha") is None:
        raise ConfigError("adapter config needs lora_alpha (the LoRA scaling numerator).")
    if not config.get("target_modules") and not config.get("target_parameters"):
        raise ConfigError("adapter config names no target_modules or target_parameters.")
    # what vLLM's PEFTHelper rejects, caught before a rollout instead of inside vLLM
    if config.get("use_dora"):
        raise ConfigError("vLLM does not serve DoRA adapters; train with use_dora=False.")
    if config.get("bias", "none") != "none" or config.get("lora_bias"):
        raise ConfigError("vLLM does not serve adapters with trained biases; use bias='none'.")
    if config.get("modules_to_save"):
        raise ConfigError(
            "vLLM does not serve adapters with modules_to_save (fully trained modules); "
            f"got {config['modules_to_save']}."
        )


def infer_adapter_config(weights: Mapping[str, torch.Tensor], *, alpha: float) -> dict[str, Any]:
    """A minimal peft LoRA config read off adapter weights (``lora_A``: ``[r, in]``).

    The rank and the adapted Linear modules are visible in the weights; ``alpha`` is not
    (only ``alpha / r`` scales the update), so it must be given. Fused expert parameters
    (peft ``target_parameters``) cannot be told apart from Linear modules by their names
    and shapes: pass their config explicitly.
    """
    modules: set[str] = set()
    ranks: set[int] = set()
    for name, tensor in weights.items():
        parts = name.split(".")
        if "lora_A" not in parts:
            continue
        i = parts.index("lora_A")
        owner = ".".join(parts[:i])
        if owner.startswith("base_model.model."):
            owner = owner[len("base_model.model.") :]
        modules.add(owner)
        ranks.add(int(tensor.shape[0]))
    if not modules:
        raise ConfigError(
            "no lora_A weights found: load_adapter expects peft state-dict names as produced "
            "by agentgym.trainers.models.adapter_state_dict."
        )
    if len(ranks) != 1:
        raise ConfigError(
            f"adapter weights have several ranks {sorted(ranks)}; pass adapter_config "
            "(the peft model's config) instead of inferring it."
        )
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": ranks.pop(),
        "lora_alpha": float(alpha),
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": sorted(modules),
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "modules_to_save": None,
    }
    return config


def write_peft_adapter(
    directory: str | Path, weights: Mapping[str, torch.Tensor], config: Mapping[str, Any]
) -> Path:
    """Write ``weights`` and ``config`` as a peft adapter directory.

    The result (``adapter_config.json`` + ``adapter_model.safetensors``) loads with
    ``PeftModel.from_pretrained`` and with vLLM's ``LoRARequest``. Tensors are copied to
    CPU, contiguous, in their own dtype.
    """
    from safetensors.torch import save_file

    if not weights:
        raise ConfigError("no adapter weights to write (the state dict is empty).")
    bad = [k for k in weights if "lora_" not in k]
    if bad:
        raise ConfigError(
            f"not LoRA adapter weights: {bad[:3]}; the vLLM engine takes adapters only, never "
            "full model weights."
        )
    _check_adapter_config(config)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in weights.items()}
    save_file(tensors, str(directory / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    (directory / ADAPTER_CONFIG).write_text(
        json.dumps(dict(config), indent=2, sort_keys=True), encoding="utf-8"
    )
    return directory


def vllm_lora_rank(r: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that fits an adapter of rank ``r``."""
    for slot in VLLM_LORA_RANKS:
        if slot >= r:
            return slot
    raise ConfigError(f"LoRA rank {r} is above vLLM's largest max_lora_rank {VLLM_LORA_RANKS[-1]}.")


def save_base_model(model: nn.Module, tokenizer: Any, path: str | Path) -> Path:
    """Save the base weights of ``model`` (a plain or a peft model) for vLLM to load.

    peft wraps each adapted Linear (``q_proj.base_layer.weight``) and adds ``lora_*``
    tensors; those are stripped, so the directory holds the original architecture's
    weights under their original names, with the model's config and ``tokenizer``. The
    adapter is *not* merged: the base weights are written exactly as they are.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    state: dict[str, torch.Tensor] = {}
    for name, tensor in base.state_dict().items():
        parts = name.split(".")
        if any(p.startswith("lora_") or p == "modules_to_save" for p in parts):
            continue
        clean = ".".join(p for p in parts if p not in ("base_layer", "original_module"))
        state[clean] = tensor
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    base.save_pretrained(str(path), state_dict=state, safe_serialization=True)
    tokenizer.save_pretrained(str(path))
    return path


# ---------------------------------------------------------------------------- sampling


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
            tuple(encode_prompt(tokenizer, r.messages)),
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


# ---------------------------------------------------------------------------- engine


class VLLMEngine(RolloutEngine):
    """Batched generation with vLLM, colocated with the trainer (see the module docstring).

    Args:
        model_path: local Hugging Face directory with the *base* weights (for example what
            :func:`save_base_model` or :func:`~agentgym.trainers.models.save_model`
            writes, or any HF model directory vLLM supports).
        tokenizer: agentgym's tokenizer for this model (chat template, eos); prompts are
            encoded and completions decoded with it.
        adapter_config: the LoRA config of the trainer's adapter: a ``PeftModel``, a peft
            ``LoraConfig`` or an ``adapter_config.json`` mapping. ``None``: inferred from
            the first adapter's shapes plus ``lora_alpha``.
        lora_alpha: LoRA alpha, used only when the config is inferred.
        enable_lora: serve LoRA adapters (``False``: base model only; :meth:`load_adapter`
            then raises).
        max_lora_rank: vLLM's LoRA slot rank; default the adapter's rank rounded up to a
            value vLLM accepts (16 when no rank is known yet).
        gpu_memory_utilization: the share of each GPU's memory vLLM may take (weights and
            KV cache); the trainer needs the rest.
        max_model_len: context length (prompt + completion); default the model's.
        enable_sleep_mode: allow :meth:`sleep`/:meth:`wake`; default ``colocated``.
        colocated: the trainer shares the GPUs (the default).
        seed: vLLM's seed and the engine's RNG for requests without their own seed.
        dtype: weights/activations dtype (``"auto"``: the checkpoint's; ``"bfloat16"``
            is the usual choice on GPUs).
        tensor_parallel_size: GPUs per engine.
        enforce_eager: no CUDA graphs or compilation (faster start, slower decode).
        enable_prefix_caching: reuse the KV cache of shared prompt prefixes (the G
            samples of a task). Reuse changes the floating-point path, so bitwise
            reproducibility of seeded samples across calls needs ``False``.
        tokenizer_path: where vLLM loads its tokenizer (used only for stop strings);
            default ``model_path``.
        adapter_dir: parent directory of the per-step adapter directories; default a new
            temporary directory (under ``/dev/shm`` when it exists), deleted on
            :meth:`close`.
        llm_kwargs: further ``vllm.LLM`` keyword arguments (``max_num_seqs``, ...).
    """

    #: the engine holds its own copy of the weights: the loop must call load_adapter.
    shares_weights = False

    def __init__(
        self,
        model_path: str | Path,
        tokenizer: Any,
        *,
        adapter_config: Any = None,
        lora_alpha: float | None = None,
        enable_lora: bool = True,
        max_lora_rank: int | None = None,
        gpu_memory_utilization: float = 0.3,
        max_model_len: int | None = None,
        enable_sleep_mode: bool | None = None,
        colocated: bool = True,
        seed: int = 0,
        dtype: str = "auto",
        tensor_parallel_size: int = 1,
        enforce_eager: bool = False,
        enable_prefix_caching: bool = True,
        tokenizer_path: str | Path | None = None,
        adapter_dir: str | Path | None = None,
        llm_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        vllm = import_vllm()
        model_path = Path(model_path)
        if not (model_path / "config.json").is_file():
            raise ConfigError(
                f"vLLM model path {str(model_path)!r} has no config.json; point it at a local "
                "Hugging Face directory with the base weights (save_base_model writes one)."
            )
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise ConfigError(
                f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}."
            )
        if tensor_parallel_size < 1:
            raise ConfigError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size}.")
        if max_model_len is not None and max_model_len < 2:
            raise ConfigError(f"max_model_len must be >= 2, got {max_model_len}.")
        self.tokenizer = tokenizer
        self.model_path = model_path
        self.enable_lora = enable_lora
        self.adapter_config = (
            adapter_config_dict(adapter_config) if adapter_config is not None else None
        )
        self.lora_alpha = lora_alpha
        rank = int(self.adapter_config["r"]) if self.adapter_config else None
        if max_lora_rank is None:
            max_lora_rank = vllm_lora_rank(rank) if rank else 16
        elif max_lora_rank not in VLLM_LORA_RANKS:
            raise ConfigError(
                f"max_lora_rank {max_lora_rank} is not one vLLM accepts: {VLLM_LORA_RANKS}."
            )
        if rank and rank > max_lora_rank:
            raise ConfigError(f"adapter rank {rank} exceeds max_lora_rank {max_lora_rank}.")
        self.max_lora_rank = max_lora_rank
        self.enable_sleep_mode = colocated if enable_sleep_mode is None else enable_sleep_mode
        self.eos_ids = _eos_ids(tokenizer, model_path)
        self._rng = random.Random(seed)
        self.generated_tokens = 0
        self.sleeping = False
        self.sleep_s = 0.0
        self.wake_s = 0.0
        self._lora: Any = None
        self._next_lora_id = 0
        self._owned_paths: list[Path] = []

        self._lora_request_cls = _lora_request_class() if enable_lora else None
        self._sampling_cls = vllm.SamplingParams
        if adapter_dir is None:
            shm = Path("/dev/shm")
            parent = str(shm) if shm.is_dir() else None
            self.adapter_root = Path(tempfile.mkdtemp(prefix="agentgym-vllm-lora-", dir=parent))
            self._owned_paths.append(self.adapter_root)
        else:
            self.adapter_root = Path(adapter_dir)
            self.adapter_root.mkdir(parents=True, exist_ok=True)
        self._finalizer = weakref.finalize(self, _remove_paths, self._owned_paths)

        kwargs: dict[str, Any] = {
            "model": str(model_path),
            "tokenizer": str(tokenizer_path or model_path),
            "seed": seed,
            "dtype": dtype,
            "gpu_memory_utilization": gpu_memory_utilization,
            "max_model_len": max_model_len,
            "tensor_parallel_size": tensor_parallel_size,
            "enforce_eager": enforce_eager,
            "enable_sleep_mode": self.enable_sleep_mode,
            "enable_prefix_caching": enable_prefix_caching,
            "logprobs_mode": "processed_logprobs",
        }
        if enable_lora:
            kwargs.update(
                enable_lora=True, max_loras=1, max_cpu_loras=1, max_lora_rank=max_lora_rank
            )
        kwargs.update(dict(llm_kwargs or {}))
        self.llm: Any = vllm.LLM(**kwargs)
        self.max_model_len = _engine_max_model_len(self.llm, max_model_len)

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
        path = write_peft_adapter(self.adapter_root / f"adapter_{lora_id:06d}", weights, config)
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
        return self._lora_request_cls(f"agentgym-adapter-{lora_id}", lora_id, str(path))

    # ------------------------------------------------------------------ sleep / wake

    def sleep(self) -> None:
        """Level-1 sleep: weights to CPU memory, KV cache dropped (no-op without sleep mode)."""
        if not self.enable_sleep_mode or self.sleeping:
            return
        t0 = time.monotonic()
        self.llm.reset_prefix_cache()
        self.llm.sleep(level=1)
        self.sleeping = True
        self.sleep_s += time.monotonic() - t0

    def wake(self) -> None:
        """Bring the weights back and re-allocate the KV cache; re-issue the adapter."""
        if not self.sleeping:
            return
        t0 = time.monotonic()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
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
        prompts = [encode_prompt(tok, r.messages) for r in requests]
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
        outputs = self.llm.generate(
            [{"prompt_token_ids": p} for p in prompts],
            params,
            use_tqdm=False,
            lora_request=self._lora,
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
        """Shut vLLM down, free its GPU memory and delete the adapter directories."""
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
        self._finalizer()

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _lora_request_class() -> Any:
    try:
        from vllm.lora.request import LoRARequest
    except ImportError as e:  # pragma: no cover - only with a broken vLLM install
        raise ConfigError(VLLM_MISSING) from e
    return LoRARequest


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


def _remove_paths(paths: list[Path]) -> None:
    for p in paths:
        shutil.rmtree(p, ignore_errors=True)
