"""A launch run before it is launched: one rank's set-up and first step at the real shapes.

``agentgym train CONFIG --dry-run --rank R`` runs rank ``R`` of the configured device mesh
in one process on CPU, with PyTorch's fake process group and fake tensors (torchtitan's
``COMM_MODE=fake_backend`` and memory estimator): the trainer's own set-up and training
step, at the model's real architecture, allocating nothing (docs/distributed.md).

* :mod:`.rank` -- :func:`dry_run_rank` and its :class:`RankFigures`;
* :mod:`.index` -- a checkpoint's headers without its weights (DeepSeek-V3's published
  layout), what the loading plan is read against;
* :mod:`.meter` -- bytes a rank holds (shares, optimizer state) and allocates; the real
  multi-process runs are measured with the same functions.
"""

from __future__ import annotations

from agentgym import lazy_exports

_LAZY = {
    "RankFigures": "agentgym.trainers.dry_run.rank",
    "dry_run_rank": "agentgym.trainers.dry_run.rank",
    "describe_checkpoint": "agentgym.trainers.dry_run.index",
    "share_bytes": "agentgym.trainers.dry_run.meter",
    "optimizer_bytes": "agentgym.trainers.dry_run.meter",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = sorted(_LAZY)
