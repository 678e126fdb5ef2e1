"""The model cut for the device mesh: one parallelize function per model family.

As torchtitan's ``parallelize_llama`` / ``parallelize_deepseekv3``, each function takes
the whole (peft) model and this rank's place on the mesh, and applies, in order: the
pipeline cut (this rank's stage of the decoder layers), the routed experts' split over
the expert group (mixture-of-experts families), tensor parallelism (DTensor plans, loss
parallelism keeping the logits split over the vocabulary), activation checkpointing
(inside FSDP2's units) and FSDP2 sharding; then, for a model built on the meta device,
each rank allocates and reads its own share of the checkpoint. What one call did is a
:class:`Cut` (the stage module, the experts' shares, the decoder layers' count).

* :func:`parallelize_dense` -- dense decoders (Qwen2, Llama): attention and MLP;
* :func:`parallelize_moe` -- DeepSeek-V3-style mixture of experts: the same, plus the
  routed experts split over ``ep * tp`` ranks with their LoRA (:mod:`.experts`).

:func:`parallelize` picks by the config's ``model_type`` (:data:`FAMILIES`), and by
structure for a family not listed (fused experts found: the MoE function).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from agentgym.generation import stage_ranges
from agentgym.trainers.loading import load_rank_share, quantized_expert_params, source_of
from agentgym.trainers.parallel.activations import checkpoint_layers
from agentgym.trainers.parallel.experts import ExpertGroup, ExpertShard, find_experts, shard_experts
from agentgym.trainers.parallel.layout import Layout
from agentgym.trainers.parallel.mesh import ParallelMesh
from agentgym.trainers.parallel.pipeline import StageModule, cut_stage
from agentgym.trainers.parallel.quant import is_quantized
from agentgym.trainers.parallel.tensor_parallel import apply_tensor_parallel, decoder_layers


@dataclass
class Cut:
    """What one parallelize call made of the model on this rank.

    Attributes:
        num_layers: the model's decoder layers (all stages).
        stage: the layers this rank's stage holds.
        stage_module: the stage as a module the pipeline schedule calls (None: no pipeline).
        experts: name -> (kind, share) of the parameters holding a share of the experts.
        expert_group: the rank's expert group (MoE families).
    """

    num_layers: int
    stage: range
    stage_module: StageModule | None = None
    experts: dict[str, tuple[str, ExpertShard]] = field(default_factory=dict)
    expert_group: ExpertGroup | None = None


def _stage(
    model: nn.Module, pmesh: ParallelMesh, layout: Layout
) -> tuple[nn.Module, Cut, list[nn.Module]]:
    """The pipeline cut: this rank's stage of the decoder layers (the model itself keeps
    only them under ``pp > 1``)."""
    lm = model.get_base_model()
    num_layers = len(decoder_layers(lm)[1])
    stage = stage_ranges(num_layers, layout.pp)[pmesh.coords.pp]
    if layout.pp > 1:
        cut_stage(lm, stage)
    _, all_layers = decoder_layers(lm)
    return lm, Cut(num_layers=num_layers, stage=stage), [all_layers[i] for i in stage]


def _finish(
    model: nn.Module,
    lm: nn.Module,
    layers: list[nn.Module],
    cut: Cut,
    pmesh: ParallelMesh,
    layout: Layout,
    activation_checkpointing: bool,
) -> Cut:
    """Tensor parallelism, activation checkpointing, FSDP2, and the rank's share read."""
    if layout.tp > 1:  # loss parallelism: the logits stay split over the vocabulary
        apply_tensor_parallel(lm, pmesh.tp, layers, loss_parallel=True)
    if activation_checkpointing:  # inside FSDP2's units, as torchtitan orders them
        # under tp each rank keeps its slice of a layer's input
        checkpoint_layers(layers, pmesh.tp.get_group() if layout.tp > 1 else None)
    cut.stage_module = StageModule(lm, cut.stage) if layout.pp > 1 else None
    _apply_fsdp(model, lm, layers, cut.stage_module, pmesh, layout)
    source = source_of(model)
    if source is not None:  # allocate and read this rank's share (no whole copy)
        offsets = {n: s.offset for n, (kind, s) in cut.experts.items() if kind == "base"}
        adapters = {
            n: (kind, s.offset, s.total) for n, (kind, s) in cut.experts.items() if kind != "base"
        }
        load_rank_share(model, source, offsets, expert_adapters=adapters)
    return cut


def parallelize_dense(
    model: nn.Module, pmesh: ParallelMesh, layout: Layout, *, activation_checkpointing: bool
) -> Cut:
    """A dense decoder (Qwen2, Llama): the stage cut, tensor parallelism on attention and
    MLP, checkpointing, FSDP2 (see the module docstring)."""
    lm, cut, layers = _stage(model, pmesh, layout)
    return _finish(model, lm, layers, cut, pmesh, layout, activation_checkpointing)


def parallelize_moe(
    model: nn.Module, pmesh: ParallelMesh, layout: Layout, *, activation_checkpointing: bool
) -> Cut:
    """A DeepSeek-V3-style mixture of experts: :func:`parallelize_dense`'s steps, and the
    routed experts split over the stage's ``ep * tp`` ranks (whole experts each, their
    LoRA with them) before tensor parallelism splits the rest."""
    lm, cut, layers = _stage(model, pmesh, layout)
    cut.expert_group = ExpertGroup(
        group=pmesh.expert_group,
        size=layout.expert_split,
        index=layout.expert_index(pmesh.rank),
        tp_mesh=pmesh.tp if layout.tp > 1 else None,
    )
    if layout.expert_split > 1:
        cut.experts = shard_experts(model, cut.expert_group)
    return _finish(model, lm, layers, cut, pmesh, layout, activation_checkpointing)


#: the parallelize function of each model family (``config.model_type``)
FAMILIES: dict[str, Callable[..., Cut]] = {
    "qwen2": parallelize_dense,
    "llama": parallelize_dense,
    "deepseek_v3": parallelize_moe,
}


def parallelize(
    model: nn.Module, pmesh: ParallelMesh, layout: Layout, *, activation_checkpointing: bool
) -> Cut:
    """The family's parallelize function applied to ``model`` (module docstring)."""
    family = str(getattr(model.get_base_model().config, "model_type", ""))
    fn = FAMILIES.get(family) or (parallelize_moe if find_experts(model) else parallelize_dense)
    return fn(model, pmesh, layout, activation_checkpointing=activation_checkpointing)


def _apply_fsdp(
    model: nn.Module,
    lm: nn.Module,
    layers: list[nn.Module],
    stage_module: Any,
    pmesh: ParallelMesh,
    layout: Layout,
) -> None:
    """FSDP2 units: each layer's experts over ``dp_shard`` (or left out of FSDP when
    ``dp_shard`` is 1: each expert then has one owner), each layer over ``dp``, and the
    root (the stage module under pipelining)."""
    if layout.dp == 1:
        return
    from torch.distributed.fsdp import fully_shard

    # a quantized base (torchao tensors, which FSDP2 does not shard) stays whole
    ignored: set[nn.Parameter] = {p for p in model.parameters() if is_quantized(p)}
    ignored |= quantized_expert_params(model, source_of(model))  # fp8 at load
    owned = {id(m) for layer in layers for m in layer.modules()}
    for outer_name, experts, _ in find_experts(model):
        if id(experts) not in owned:
            continue
        outer = model.get_submodule(outer_name)
        if layout.dp_shard > 1:
            quantized = {p for p in outer.parameters() if p in ignored}
            kw_e = {"ignored_params": quantized} if quantized else {}
            fully_shard(outer, mesh=pmesh.dp_shard, **kw_e)
        else:
            ignored.update(outer.parameters())
    kw = {"ignored_params": ignored} if ignored else {}
    for layer in layers:
        fully_shard(layer, mesh=pmesh.dp, **kw)
    root = stage_module if stage_module is not None else lm
    fully_shard(root, mesh=pmesh.dp, **kw)
