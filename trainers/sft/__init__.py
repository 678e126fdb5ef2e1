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

from agentgym import lazy_exports

#: public name -> the module that defines it (imported on first use: the config needs no torch)
_LAZY = {
    "SFTConfig": "agentgym.trainers.sft.config",
    "SFTData": "agentgym.trainers.sft.config",
    "SFTTrain": "agentgym.trainers.sft.config",
    "Example": "agentgym.trainers.sft.data",
    "collect_examples": "agentgym.trainers.sft.data",
    "drop_lines": "agentgym.trainers.sft.data",
    "example_corpus": "agentgym.trainers.sft.data",
    "SFTLoss": "agentgym.trainers.sft.train",
    "batch_loss": "agentgym.trainers.sft.train",
    "batch_stream": "agentgym.trainers.sft.train",
    "build_model_and_examples": "agentgym.trainers.sft.train",
    "epoch_batches": "agentgym.trainers.sft.train",
    "run_sft": "agentgym.trainers.sft.train",
    "sft_step": "agentgym.trainers.sft.train",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = sorted(_LAZY)
