"""agentgym.trainers: all-sync DAPO with LoRA (see ``docs/trainer.md``).

* :mod:`.algorithm` -- DAPO's pieces as pure functions on tensors.
* :mod:`.loop` -- :class:`DAPOTrainer`, the all-sync loop (``agentgym train``).
* :mod:`.sft` -- supervised warm start (``agentgym sft``).
* :mod:`.engines` -- rollout engines behind one interface (HF ``generate`` built in).
* :mod:`.learner` -- the trainable model, optimizer and update.
* :mod:`.models`, :mod:`.tokenizer` -- tiny presets, local loading, LoRA with checked
  targets, the in-process tokenizer.
* :mod:`.config` -- dataclass configs, YAML and ``key=value`` overrides.
* :mod:`.plan` -- the memory planner (``agentgym plan``).

Heavy modules (torch, transformers, peft) load on first attribute access.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "DAPOTrainer": "agentgym.trainers.loop",
    "TrainConfig": "agentgym.trainers.config",
    "SFTConfig": "agentgym.trainers.config",
    "load_config": "agentgym.trainers.config",
    "run_sft": "agentgym.trainers.sft",
    "HFEngine": "agentgym.trainers.engines.hf",
    "RolloutEngine": "agentgym.trainers.engines.base",
    "Learner": "agentgym.trainers.learner",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentgym.trainers' has no attribute {name!r}")


__all__ = sorted(_LAZY)
