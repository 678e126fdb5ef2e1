"""The rollout engine's place on the trainer's ranks, checked before any process starts.

Under ``--nproc N`` with ``rollout.engine: vllm`` every rank holds one engine worker
(:class:`~agentgym.generation.EngineLayout`: replicas of ``tp x pp`` workers). Two layouts
then share the ranks, the engine's and the trainer's mesh, and the adapter sync is cheap
only when they line up (:class:`~agentgym.generation.AdapterSync`):

* **stages**: when the trainer pipelines (``distributed.pp > 1``), each rank's engine
  stage must be its trainer stage (engine ``pipeline_parallel_size`` = ``distributed.pp``
  and one engine stage spanning exactly one trainer stage's ranks), so that a stage's
  adapter never leaves its ranks; the engine takes the trainer's split of the layers
  (``stage_ranges``). Otherwise the run is refused here, with the sizes that line up.
* **experts**: under expert parallelism, engine worker ``t`` of a stage serves a
  contiguous ``1 / tp`` of the routed experts; when those are the experts its rank trains
  (``distributed.ep * tp`` = the engine's ``tensor_parallel_size``), no expert's adapter
  rows travel at a sync. Otherwise they travel (reported, not refused).

:func:`engine_placement` is what ``agentgym train --print-config`` and the launcher run;
it reads the model's shape from ``model.architecture``, ``model.path``'s ``config.json``
or the preset, never the weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentgym import ConfigError
from agentgym.generation import PRESETS, EngineLayout, engine_layout
from agentgym.trainers.parallel import Layout


def model_config(model: Any) -> dict[str, Any]:
    """The ``config.json`` fields of a ``model`` config section, as far as they are known
    without the weights: its ``path``'s ``config.json``, its ``architecture`` or its
    preset (empty when none says)."""
    if getattr(model, "path", None) and (Path(model.path) / "config.json").is_file():
        return json.loads((Path(model.path) / "config.json").read_text(encoding="utf-8"))
    if getattr(model, "architecture", None):
        return dict(model.architecture)
    if getattr(model, "preset", None) in PRESETS:
        config = {**PRESETS[model.preset], **dict(model.preset_overrides or {})}
        if model.preset == "tiny-deepseek-v3":
            config.setdefault("model_type", "deepseek_v3")
        return config
    return {}


def model_shape(model: Any) -> tuple[int | None, int]:
    """``(decoder layers, routed experts)`` of a ``model`` config section
    (:func:`model_config`; None layers when unknown, 0 experts for a dense model)."""
    config = model_config(model)
    layers = config.get("num_hidden_layers")
    experts = config.get("n_routed_experts") or config.get("num_local_experts") or 0
    return (int(layers) if layers else None), int(experts)


def engine_placement(cfg: Any, world_size: int) -> list[str]:
    """The engine's layout against the trainer's, as lines to print (what this machine's
    vLLM can serve is :func:`refuse_unservable`'s).

    Raises:
        ConfigError: the engine's ``tp x pp`` does not divide the ranks, or its stages
            cut the trainer's.
    """
    if cfg.rollout.engine != "vllm":
        return []
    engine = engine_layout(cfg.rollout.engine_settings, world_size)
    layers, experts = model_shape(cfg.model)
    lines = engine.describe(layers, experts)
    mesh = cfg.distributed.strategy == "fsdp2" and Layout.from_config(cfg.distributed)
    if not mesh or mesh.is_default or mesh.world_size != world_size:
        return lines
    lines.append(f"trainer: {mesh.describe()} over {world_size} ranks")
    _check_stages(engine, mesh)
    if layers and mesh.pp > 1:
        split = ", ".join(str(n) for n in engine.partition(layers))
        lines.append(f"stages: engine stage s = trainer stage s on every rank ({split} layers)")
    if experts and mesh.expert_split > 1 and engine.expert_parallel:
        moved = [
            r
            for r in range(world_size)
            if engine.experts_of(r, experts) != mesh.experts_of(r, experts)
        ]
        lines.append(
            "experts: each engine worker serves the experts its rank trains (none travel at a sync)"
            if not moved
            else f"experts: {len(moved)} of {world_size} ranks serve experts another rank "
            f"trains (their adapter rows travel at each sync); to line them up set "
            f"tensor_parallel_size = distributed.ep x tp = {mesh.expert_split}"
        )
    return lines


def _check_stages(engine: EngineLayout, mesh: Layout) -> None:
    if mesh.pp == 1 and engine.pp == 1:
        return
    if mesh.pp > 1 and engine.pp != mesh.pp:
        raise ConfigError(
            f"rollout.engine_options.pipeline_parallel_size={engine.pp} but the trainer "
            f"pipelines over distributed.pp={mesh.pp} stages: set pipeline_parallel_size="
            f"{mesh.pp} (each engine stage on the ranks of one trainer stage, whose adapter "
            "then never leaves them)."
        )
    per_stage = mesh.world_size // mesh.pp
    for rank in range(mesh.world_size):
        if mesh.pp > 1 and engine.worker(rank).stage != mesh.coords(rank).pp:
            raise ConfigError(
                f"rank {rank} would hold engine stage {engine.worker(rank).stage} but trainer "
                f"stage {mesh.coords(rank).pp}: an engine stage must span one trainer stage's "
                f"{per_stage} ranks: set rollout.engine_options.tensor_parallel_size="
                f"{per_stage} (one engine replica of pp {mesh.pp} x tp {per_stage})."
            )


def refuse_unservable(cfg: Any) -> None:
    """Raise before any process starts what every rank's vLLM would raise: vLLM not
    installed, or a model it cannot serve on this platform (MLA's head sizes, LoRA on a
    mixture-of-experts model on its CPU build: :func:`~agentgym.generation.vllm_refusal`).
    """
    if cfg.rollout.engine != "vllm":
        return
    from agentgym.generation import import_vllm, vllm_refusal  # torch: only for vLLM runs

    import_vllm()
    config = model_config(cfg.model)
    if not config:
        return
    from vllm.platforms import current_platform

    why = vllm_refusal(config, cpu=current_platform.is_cpu(), lora=cfg.lora.enabled)
    if why is not None:
        raise ConfigError(why)
