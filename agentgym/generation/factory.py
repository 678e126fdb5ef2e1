"""Pick a rollout engine by name: ``hf`` (embedded, the default) or ``vllm``.

:func:`make_engine` is what a trainer config's ``rollout.engine`` maps to. Both engines
take the trainer's model object; they differ in what they do with it:

* ``hf``: :class:`~agentgym.generation.hf.HFEngine` generates with that very object
  (``shares_weights``: adapter syncs are no-ops).
* ``vllm``: :class:`~agentgym.generation.vllm.VLLMEngine` loads the model's *base*
  weights into vLLM once (from ``model_path``, or from a copy written to ``workdir``:
  also when ``model_path``'s config lacks keys vLLM needs, such as DeepSeek-V3's routing),
  takes the adapter config from the peft model, and is handed the current adapter at
  once, so its first rollout already uses the trainer's weights (this matters after a
  resume). After that the loop's ``load_adapter`` calls keep it in step. A temporary
  ``workdir`` made here is handed to the engine (:meth:`RolloutEngine.own`), which
  deletes it on ``close()``. vLLM computes in the trainer's dtype (``dtype: auto`` in
  its options becomes the base weights' dtype, never the checkpoint's), and one process
  runs it: with several ranks every engine would take the same GPU, so that is refused.

Each engine takes its settings as one typed options object
(:mod:`.options`); ``make_engine`` accepts that object or the mapping a config writes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn

from agentgym import ConfigError, UnknownNameError
from agentgym.generation.base import RolloutEngine
from agentgym.generation.options import (
    ENGINE_OPTIONS,
    EngineOptions,
    HFEngineOptions,
    VLLMEngineOptions,
    engine_options,
)

#: engine names accepted by :func:`make_engine`
ENGINE_KINDS: tuple[str, ...] = tuple(ENGINE_OPTIONS)


def make_engine(
    kind: str,
    *,
    model: nn.Module,
    tokenizer: Any,
    seed: int = 0,
    model_path: str | Path | None = None,
    workdir: str | Path | None = None,
    options: Mapping[str, Any] | EngineOptions | None = None,
) -> RolloutEngine:
    """Build the rollout engine ``kind`` for the trainer's ``model``.

    Args:
        kind: ``"hf"`` or ``"vllm"``.
        model: the trainer's model (a ``PeftModel`` when training LoRA).
        tokenizer: its tokenizer (chat template, eos).
        seed: the engine's seed for requests without their own.
        model_path: ``vllm`` only: a local HF directory holding the *base* weights of
            ``model`` (for example ``model.path`` of the config). ``None``: the base
            weights are saved from ``model`` to ``workdir/vllm_base`` first.
        workdir: ``vllm`` only: where that copy and the per-step adapters go; ``None``: a
            temporary directory that the engine owns and deletes when it is closed.
        options: the engine's typed options (:class:`HFEngineOptions` or
            :class:`VLLMEngineOptions`), or the mapping a config writes (checked by
            :func:`~agentgym.generation.options.engine_options`).

    Raises:
        UnknownNameError: unknown ``kind`` or option name.
        ConfigError: a bad option value.
        ConfigError: ``vllm`` without vLLM installed, or for a model without a LoRA
            adapter (vLLM follows training through adapters only).
    """
    if kind not in ENGINE_KINDS:
        raise UnknownNameError("rollout engine", kind, ENGINE_KINDS)
    opts = engine_options(kind, options)
    if isinstance(opts, HFEngineOptions):
        from agentgym.generation.hf import HFEngine

        return HFEngine(model, tokenizer, opts, shares_weights=True, seed=seed)
    return _make_vllm(model, tokenizer, seed, model_path, workdir, opts)


def _make_vllm(
    model: nn.Module,
    tokenizer: Any,
    seed: int,
    model_path: str | Path | None,
    workdir: str | Path | None,
    options: VLLMEngineOptions,
) -> RolloutEngine:
    from agentgym.generation.adapters import save_base_model, vllm_config_additions
    from agentgym.generation.models import adapter_state_dict
    from agentgym.generation.vllm import VLLMEngine, import_vllm, refuse_bootstrapping_child

    if not hasattr(model, "peft_config"):
        raise ConfigError(
            "rollout.engine: vllm needs a LoRA adapter (lora.enabled: true): the vLLM engine "
            "follows training by loading the adapter each step and never receives full "
            "weights. Use rollout.engine: hf for full fine-tuning."
        )
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        raise ConfigError(
            f"rollout.engine: vllm runs in one process here, but this run has {world}: each "
            "rank's vLLM would land on GPU 0. Run vLLM with one process (its own "
            "rollout.engine_options.tensor_parallel_size spans the GPUs), or use "
            "rollout.engine: hf with several ranks."
        )
    refuse_bootstrapping_child()  # a script without a __main__ guard, re-imported by spawn
    import_vllm()  # fail before writing anything when vLLM is missing
    if options.dtype == "auto":  # the trainer's dtype, not the checkpoint's
        options = dataclasses.replace(options, dtype=base_dtype_name(model))
    owned: Path | None = None
    if workdir is None:
        owned = Path(tempfile.mkdtemp(prefix="agentgym-vllm-"))
        workdir = owned
    workdir = Path(workdir)
    if model_path is not None:
        config_file = Path(model_path) / "config.json"
        config = json.loads(config_file.read_text()) if config_file.is_file() else {}
        missing = vllm_config_additions(config)
        if missing:  # vLLM would compute otherwise than transformers: a copy that says how
            print(
                f"[agentgym] vLLM engine: {config_file} lacks {sorted(missing)}, which vLLM "
                "needs to route as transformers does; writing a copy of the base weights "
                "with them.",
                file=sys.stderr,
                flush=True,
            )
            model_path = None
    try:
        if model_path is None:
            model_path = save_base_model(model, tokenizer, workdir / "vllm_base")
        engine = VLLMEngine(
            model_path,
            tokenizer,
            options,
            adapter_config=model,
            seed=seed,
            adapter_dir=workdir / "vllm_adapters",
        )
    except BaseException:
        if owned is not None:
            shutil.rmtree(owned, ignore_errors=True)
        raise
    if owned is not None:
        engine.own(owned)
    engine.load_adapter(adapter_state_dict(model))
    return engine


def base_dtype_name(model: nn.Module) -> str:
    """The dtype of the model's frozen (base) floating weights, by vLLM's name
    (``bfloat16``, ``float32``); the trainable weights' when nothing is frozen."""
    frozen = [p.dtype for p in model.parameters() if p.is_floating_point() and not p.requires_grad]
    dtypes = frozen or [p.dtype for p in model.parameters() if p.is_floating_point()]
    return str(dtypes[0]).removeprefix("torch.") if dtypes else "float32"
