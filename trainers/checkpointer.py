"""A run's checkpoints, made of registered parts: one mechanism for every training loop.

A checkpoint (the files: :mod:`.checkpoint`) holds

* the **learner**'s state (:meth:`~agentgym.trainers.learner.Learner.state_dict`): the
  adapter or, in full fine-tuning, the whole model; the critic; the optimizer's (shards);
  its count of optimizer steps, which the learning-rate schedule reads;
* the **RNG** states (every RNG the run draws from, :func:`.checkpoint.rng_state`);
* the **step**;
* each **registered part**'s state: an object with ``state_dict()`` (JSON-ready) and
  ``load_state_dict(state)``, registered under a name with :meth:`Checkpointer.register`.
  The RL trainer registers its task stream (with the quarantine) and its step kind
  (T-PPO's responses in flight); SFT registers its example order.

The engine's adapter is not a part: it is the learner's, pushed to the engine after a
resume. :meth:`Checkpointer.save` writes them all (every rank calls it);
:meth:`Checkpointer.find` finds the newest intact checkpoint and :meth:`Checkpointer.restore`
puts every part back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from agentgym import CheckpointError
from agentgym.generation import quiet_hf_loading
from agentgym.trainers.checkpoint import (
    read_checkpoint,
    read_extra_tensors,
    resume_checkpoint,
    save_checkpoint,
)
from agentgym.trainers.distributed import SINGLE, DistInfo
from agentgym.trainers.learner import Learner

#: the keys of ``trainer_state.json`` a part may not use: the learner's step count, the
#: step, the number of processes that wrote the checkpoint
RESERVED = ("updates", "step", "world_size")


class Part(Protocol):
    """What a checkpoint keeps of a component besides tensors (JSON-ready)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Checkpointer:
    """The checkpoints of one run folder: the learner, the RNGs, the step and the parts.

    Args:
        root: the folder the checkpoints go in (``<run>/checkpoints``).
        learner: whose state every checkpoint holds.
        model: the model the learner trains, for the configs written beside the weights
            (the adapter's peft config, the model's Hugging Face config); its weights
            come from the learner.
        keep: how many checkpoints to keep (older ones are pruned after a new one is
            written and summed).
        dist: this process's place in the job.
        say: where messages go (what ``--resume`` found, passed over, continues from).
    """

    def __init__(
        self,
        root: Path,
        learner: Learner,
        model: Any,
        *,
        keep: int,
        dist: DistInfo = SINGLE,
        say: Callable[[str], None] = print,
    ) -> None:
        self.root, self.learner, self.model = Path(root), learner, model
        self.keep, self.dist, self.say = keep, dist, say
        self.parts: dict[str, Part] = {}

    def register(self, name: str, part: Part) -> None:
        """Keep ``part``'s state in every checkpoint from now on. The parts' states share
        ``trainer_state.json`` with the learner's step count and the step (:data:`RESERVED`):
        their keys must differ (checked at each save)."""
        if name in self.parts:
            raise ValueError(
                f"checkpoint part {name!r} is registered already: give the second part "
                "a name of its own."
            )
        self.parts[name] = part

    def save(self, step: int) -> Path:
        """The checkpoint of ``step``, written atomically (a collective: all ranks call
        it). The parts' states are kept side by side in ``trainer_state.json``."""
        learner = self.learner.state_dict()
        state: dict[str, Any] = {"updates": learner["updates"]}
        owner = dict.fromkeys(RESERVED, "the checkpoint itself")
        for name, part in self.parts.items():
            own = part.state_dict()
            for key in own.keys() & owner.keys():
                raise ValueError(
                    f"checkpoint parts {owner[key]!r} and {name!r} both save the key {key!r}: "
                    "rename one of them (they share trainer_state.json)."
                )
            owner |= dict.fromkeys(own, name)
            state |= own
        with quiet_hf_loading():  # a whole model's "Writing model shards" bar
            return self._write(step, learner, state)

    def _write(self, step: int, learner: dict[str, Any], state: dict[str, Any]) -> Path:
        critic, lora = learner["critic"], self.learner.lora
        return save_checkpoint(
            self.root,
            step,
            model=self.model,
            optimizer_state=learner["optimizer"],
            adapter_state=learner["adapter"] if lora else None,
            model_state=None if lora else learner["model"],
            dist=self.dist,
            trainer_state=state,
            extra_tensors={"critic": critic} if critic is not None else None,
            lora=lora,
            keep=self.keep,
        )

    def find(self) -> Path | None:
        """:func:`find_checkpoint` in :attr:`root`."""
        return find_checkpoint(self.root, self.say)

    def restore(self, ckpt: Path) -> int:
        """Put back the learner, the RNGs and every part from ``ckpt``; returns its step."""
        learner = self.learner
        weights, optim_states, state = read_checkpoint(
            ckpt,
            lora=learner.lora,
            dist=self.dist,
            optimizer=learner.optimizer_shards_read,
            lazy_adapter=self.dist.layout is not None,  # a mesh rank reads its stage's
        )
        critic = read_extra_tensors(ckpt, "critic") if learner.critic_config else None
        learner.load_state_dict(
            {
                "adapter": weights if learner.lora else None,
                "model": None if learner.lora else weights,
                "critic": critic,
                "optimizer": optim_states,
                # (SFT's checkpoints before the learner kept its count: one per step)
                "updates": int(state.get("updates", state["step"])),
            }
        )
        for part in self.parts.values():
            part.load_state_dict(state)
        return int(state["step"])


def checkpoint_step(ckpt: Path) -> int:
    """The step a checkpoint was written at (its ``trainer_state.json``)."""
    return int(json.loads((Path(ckpt) / "trainer_state.json").read_text())["step"])


def find_checkpoint(root: Path, say: Callable[[str], None]) -> Path | None:
    """The checkpoint ``--resume`` continues from: the newest intact one in ``root``
    (damaged ones are named and passed over), or ``None`` (said) when there is none.

    Raises:
        CheckpointError: there are checkpoints, but none is intact.
    """
    ckpt, damaged = resume_checkpoint(root)
    for msg in damaged:
        say(f"--resume: {msg}")
    if ckpt is None and damaged:
        raise CheckpointError(
            f"--resume: no intact checkpoint in {root} (see above). Start a new run "
            "folder, or --overwrite this one."
        )
    if ckpt is None:
        say(f"--resume: no checkpoint in {root}; starting fresh.")
    elif damaged:
        say(f"--resume: continuing from {ckpt.name}, the newest intact.")
    return ckpt
