"""What SFT adds to a checkpoint: the order of its examples, as a registered part.

SFT's checkpoints are the trainer's (:class:`~agentgym.trainers.checkpointer.Checkpointer`:
the learner's weights, AdamW's state and step count, every RNG's state, the step),
written every ``train.save_every`` steps and after the last, read back by ``--resume``.
The learning rate is a function of the learner's step count and of the run's length,
and the example order a function of the seed
(:func:`~agentgym.trainers.sft.train.batch_stream` replays it up to the step), so a
resumed run takes the same steps as one that was never stopped. The one part SFT
registers, :class:`DataOrder`, keeps what that order depends on, to say when a resumed
run's differs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentgym.trainers.sft.config import SFTConfig

#: the settings the example order depends on, kept in ``trainer_state.json``
ORDER_KEYS = ("seed", "examples", "batch_size", "group_by_length")


def checkpoints_dir(out: str | Path) -> Path:
    """Where a run folder's checkpoints go (``<out>/checkpoints``, as the trainer's)."""
    return Path(out) / "checkpoints"


class DataOrder:
    """The checkpoint part of an SFT run: what the order of its examples depends on
    (:data:`ORDER_KEYS`), and the command that wrote the checkpoint. Restoring a
    checkpoint of another order (another seed, batch size, number of examples) says so:
    the run continues on the new order."""

    def __init__(
        self, cfg: SFTConfig, examples: int, total_steps: int, say: Callable[[str], None]
    ) -> None:
        t = cfg.train
        self.order = {
            "seed": cfg.run.seed,
            "examples": examples,
            "batch_size": t.batch_size,
            "group_by_length": t.group_by_length,
        }
        self.total_steps, self.say = total_steps, say

    def state_dict(self) -> dict[str, Any]:
        return {"command": "sft", "total_steps": self.total_steps, "data_order": self.order}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state.get("data_order") or {}
        order = self.order
        changed = [
            f"{k} {saved[k]} -> {order[k]}"
            for k in ORDER_KEYS
            if saved.get(k, order[k]) != order[k]
        ]
        if changed:
            self.say(
                f"--resume: the examples' order differs from the checkpoint's "
                f"({', '.join(changed)}); the resumed steps follow the new order."
            )
