"""Tensor, expert and pipeline parallelism with FSDP2 on one device mesh (docs/distributed.md).

``distributed: {dp_shard, tp, ep, pp}`` becomes a :class:`Layout` (pure numbers, read by
the trainer and by ``agentgym plan`` alike) and, on the ranks, a 4-D ``DeviceMesh``
(:mod:`.mesh`) on which the learner trains with :class:`MeshStrategy`:

* :mod:`.layout` -- the sizes, their checks, a rank's coordinates, the pipeline stages;
* :mod:`.mesh` -- the mesh and its sub-meshes (tp, dp, dp_shard, expert, pp);
* :mod:`.tensor_parallel` -- DTensor plans for attention (MLA included), MLPs, shared
  experts, embedding and head, with LoRA split like the layer it adapts;
* :mod:`.experts` -- routed experts split over ranks, tokens dispatched and combined by
  ``all_to_all_single``, expert LoRA living with its expert;
* :mod:`.pipeline` -- stages and the 1F1B schedule of ``torch.distributed.pipelining``;
* :mod:`.state` -- whole tensors from the split model and back (checkpoints, generation);
* :mod:`.parallelize` -- the model cut for the mesh, one function per model family
  (pipeline stage, experts, tensor parallelism, checkpointing, FSDP2);
* :mod:`.strategy` -- :class:`MeshStrategy`, the learner's strategy on the mesh;
* :mod:`.quant` -- a weight-only quantized frozen base (torchao) under LoRA.

Names load lazily: reading a config imports no torch.
"""

from __future__ import annotations

from agentgym import lazy_exports

_LAZY = {
    "Layout": "agentgym.trainers.parallel.layout",
    "MESH_DIMS": "agentgym.trainers.parallel.layout",
    "check_train_config": "agentgym.trainers.parallel.layout",
    "MeshStrategy": "agentgym.trainers.parallel.strategy",
    "FAMILIES": "agentgym.trainers.parallel.parallelize",
    "ParallelMesh": "agentgym.trainers.parallel.mesh",
    "QuantReport": "agentgym.trainers.parallel.quant",
    "quantize_base": "agentgym.trainers.parallel.quant",
    "quantization_error": "agentgym.trainers.parallel.quant",
    "build_mesh": "agentgym.trainers.parallel.mesh",
    "decoder_layers": "agentgym.trainers.parallel.tensor_parallel",
    "SavedBytes": "agentgym.trainers.parallel.activations",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = sorted(_LAZY)
