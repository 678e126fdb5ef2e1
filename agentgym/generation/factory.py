"""Pick a rollout engine by name: ``hf`` (embedded, the default) or ``vllm``.

:func:`make_engine` is what a trainer config's ``rollout.engine`` maps to. Both engines
take the trainer's model object; they differ in what they do with it:

* ``hf``: :class:`~agentgym.generation.hf.HFEngine` generates with that very object
  (``shares_weights``: adapter syncs are no-ops). Under several ranks each rank is a
  replica of its own.
* ``vllm``: :class:`~agentgym.generation.vllm.VLLMEngine` loads the model's *base*
  weights itself, once: from ``model_path`` (a folder of links to it with the config keys
  vLLM needs added, when it lacks some), or, for a model built in memory, from a copy
  written to ``workdir`` (by rank 0 when the engine spans several ranks). It takes the
  adapter's config from the peft model; its adapter comes from the learner
  (:class:`~agentgym.generation.sync.AdapterSync`), except in one process, where the
  model's current adapter is loaded at once. A temporary ``workdir`` made here is handed
  to the engine (:meth:`RolloutEngine.own`), which deletes it on ``close()``. vLLM
  computes in the trainer's dtype (``dtype: auto`` becomes the base weights' dtype). Under
  ``--nproc N`` its workers live on the trainer's ranks (``layout``:
  :class:`~agentgym.generation.layout.EngineLayout`).

Each engine takes its settings as one typed options object
(:mod:`.options`); ``make_engine`` accepts that object or the mapping a config writes.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgym import ConfigError, UnknownNameError
from agentgym.generation.layout import EngineLayout, Replicas
from agentgym.generation.options import (
    ENGINE_OPTIONS,
    EngineOptions,
    HFEngineOptions,
    VLLMEngineOptions,
    engine_options,
)

if TYPE_CHECKING:  # the launcher checks engine layouts without importing torch
    from torch import nn

    from agentgym.generation.base import RolloutEngine

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
    rank: int = 0,
    world_size: int = 1,
    job: str | None = None,
) -> RolloutEngine:
    """Build the rollout engine ``kind`` for the trainer's ``model``.

    Args:
        kind: ``"hf"`` or ``"vllm"``.
        model: the trainer's model (a ``PeftModel`` when training LoRA).
        tokenizer: its tokenizer (chat template, eos).
        seed: the engine's seed for requests without their own.
        model_path: ``vllm`` only: a local HF folder holding the *base* weights of
            ``model`` (``model.path`` of the config). ``None``: they are saved from
            ``model`` to ``workdir/vllm_base`` first.
        workdir: ``vllm`` only: where that copy goes (the same folder for every rank of a
            job); ``None``: a temporary folder the engine owns and deletes when closed.
        options: the engine's typed options, or the mapping a config writes.
        rank / world_size: this process's place among the trainer's ranks.
        job: ``vllm`` on several ranks: a name the same on every rank of the job.

    Raises:
        UnknownNameError: unknown ``kind`` or option name.
        ConfigError: a bad option value; ``vllm`` without vLLM installed, for a model
            without a LoRA adapter, or with a layout that does not divide the ranks.
    """
    if kind not in ENGINE_KINDS:
        raise UnknownNameError("rollout engine", kind, ENGINE_KINDS)
    opts = engine_options(kind, options)
    if isinstance(opts, HFEngineOptions):
        from agentgym.generation.hf import HFEngine

        engine = HFEngine(model, tokenizer, opts, shares_weights=True, seed=seed)
        engine.replicas = Replicas(index=rank, count=world_size, leads=True)
        return engine
    layout = engine_layout(opts, world_size)
    return _make_vllm(model, tokenizer, seed, model_path, workdir, opts, layout, rank, job)


def engine_layout(options: VLLMEngineOptions, world_size: int) -> EngineLayout:
    """Where a vLLM engine with these options sits among ``world_size`` ranks (raises
    :class:`ConfigError` when its ``tp x pp`` does not divide them)."""
    return EngineLayout(
        world_size=world_size,
        tp=options.tensor_parallel_size,
        pp=options.pipeline_parallel_size,
        expert_parallel=options.enable_expert_parallel,
    )


def _make_vllm(
    model: nn.Module,
    tokenizer: Any,
    seed: int,
    model_path: str | Path | None,
    workdir: str | Path | None,
    options: VLLMEngineOptions,
    layout: EngineLayout,
    rank: int,
    job: str | None,
) -> RolloutEngine:
    from agentgym.generation.models import adapter_state_dict
    from agentgym.generation.vllm import VLLMEngine
    from agentgym.generation.vllm_setup import import_vllm, refuse_bootstrapping_child

    if not hasattr(model, "peft_config"):
        raise ConfigError(
            "rollout.engine: vllm needs a LoRA adapter (lora.enabled: true): the vLLM engine "
            "follows training by loading the adapter each step and never receives full "
            "weights. Use rollout.engine: hf for full fine-tuning."
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
    try:
        path = _base_folder(model, tokenizer, model_path, workdir, rank, layout.world_size)
        engine = VLLMEngine(
            path,
            tokenizer,
            options,
            adapter_config=model,
            seed=seed,
            layout=layout,
            rank=rank,
            job=job,
        )
    except BaseException:
        if owned is not None:
            shutil.rmtree(owned, ignore_errors=True)
        raise
    if owned is not None:
        engine.own(owned)
    if layout.world_size == 1:  # one process: the model's adapter now (several: the sync's)
        weights = adapter_state_dict(model)
        if weights and all(t.numel() for t in weights.values()):
            engine.load_adapter(weights)
    return engine


def _base_folder(
    model: nn.Module,
    tokenizer: Any,
    model_path: str | Path | None,
    workdir: Path,
    rank: int,
    world_size: int,
) -> Path:
    """The folder vLLM loads the base weights from: ``model_path``; a folder of links to
    it with the config keys vLLM lacks (:func:`~.adapters.linked_base_copy`); or the
    model's own base weights written to ``workdir/vllm_base`` (rank 0 writes, every rank
    waits for it)."""
    from agentgym.generation.adapters import (
        linked_base_copy,
        save_base_model,
        vllm_config_additions,
    )

    if model_path is not None and (Path(model_path) / "config.json").is_file():
        config = json.loads((Path(model_path) / "config.json").read_text())
        missing = vllm_config_additions(config)
        if not missing:
            return Path(model_path)
        print(
            f"[agentgym] vLLM engine: {model_path}/config.json lacks {sorted(missing)}, which "
            "vLLM needs to route as transformers does; it reads a folder of links to the "
            "weights with them added.",
            file=sys.stderr,
            flush=True,
        )
        target, write = (
            workdir / "vllm_base",
            lambda: linked_base_copy(model_path, workdir / "vllm_base"),
        )
    else:
        target, write = workdir / "vllm_base", lambda: save_base_model(model, tokenizer, target)
    if world_size == 1:
        return write()
    import torch.distributed as dist

    if rank == 0:
        write()
    dist.barrier()
    return target


def base_dtype_name(model: nn.Module) -> str:
    """The dtype of the model's frozen (base) floating weights, by vLLM's name
    (``bfloat16``, ``float32``); the trainable weights' when nothing is frozen."""
    frozen = [p.dtype for p in model.parameters() if p.is_floating_point() and not p.requires_grad]
    dtypes = frozen or [p.dtype for p in model.parameters() if p.is_floating_point()]
    return str(dtypes[0]).removeprefix("torch.") if dtypes else "float32"
