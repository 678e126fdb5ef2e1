"""``agentgym sft``: a supervised warm start on examples the environments provide.

* :mod:`.config`: the ``data`` and ``train`` sections and :class:`SFTConfig`;
* :mod:`.data`: the examples (worked solutions, or the oracle's turns);
* :mod:`.train`: the loop (:func:`run_sft`), which writes a model directory that
  ``agentgym train`` loads with ``model.path``.
"""

from __future__ import annotations

from agentgym.trainers.sft.config import SFTConfig, SFTData, SFTTrain
from agentgym.trainers.sft.data import Example, collect_examples, drop_lines, example_corpus
from agentgym.trainers.sft.train import (
    batch_loss,
    build_model_and_examples,
    epoch_batches,
    length_groups,
    run_sft,
)

__all__ = [
    "Example",
    "SFTConfig",
    "SFTData",
    "SFTTrain",
    "batch_loss",
    "build_model_and_examples",
    "collect_examples",
    "drop_lines",
    "epoch_batches",
    "example_corpus",
    "length_groups",
    "run_sft",
]
