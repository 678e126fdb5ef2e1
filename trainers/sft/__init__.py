"""``agentgym sft``: a supervised warm start on examples the environments provide.

* :mod:`.config`: the ``data`` and ``train`` sections and :class:`SFTConfig`;
* :mod:`.data`: the examples (worked solutions, or the oracle's turns);
* :mod:`.train`: the loop (:func:`run_sft`): :class:`SFTLoss` on the trainer's one
  :class:`~agentgym.trainers.learner.Learner` (its optimizer, schedule, clipping and
  step), on the examples as :mod:`agentgym.trainers.token_rows` micro-batches (padded,
  length-grouped or packed), and a model directory that ``agentgym train`` loads with
  ``model.path``;
* :mod:`.checkpoints`: the one part SFT adds to the trainer's checkpoints
  (:class:`~agentgym.trainers.checkpointer.Checkpointer`): the examples' order;
* :mod:`.report`: the end of a run: ``plots/``, the summary, the eval table.

A run folder holds one SFT run as it holds one training run (the rules are
:mod:`agentgym.trainers.run_folder`'s): ``--resume`` continues from its newest
checkpoint, and a first SIGTERM / Ctrl-C stops after the step in progress with a
checkpoint.
"""

from __future__ import annotations

from agentgym.trainers.sft.config import SFTConfig, SFTData, SFTTrain
from agentgym.trainers.sft.data import Example, collect_examples, drop_lines, example_corpus
from agentgym.trainers.sft.train import (
    SFTLoss,
    batch_loss,
    batch_stream,
    build_model_and_examples,
    epoch_batches,
    run_sft,
    sft_step,
)

__all__ = [
    "Example",
    "SFTConfig",
    "SFTData",
    "SFTLoss",
    "SFTTrain",
    "batch_loss",
    "batch_stream",
    "build_model_and_examples",
    "collect_examples",
    "drop_lines",
    "epoch_batches",
    "example_corpus",
    "run_sft",
    "sft_step",
]
