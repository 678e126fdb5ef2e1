"""SFT's checkpoints: the trainer's format (:mod:`agentgym.trainers.checkpoint`), written
every ``train.save_every`` steps and after the last, read back by ``--resume``.

A checkpoint holds the weights (the whole model, or the adapter with ``lora.enabled``),
AdamW's state, every RNG's state and, in ``trainer_state.json``, the step and what
the order of the examples depends on. The learning rate is a function of the step
and of the run's length, and the example order a function of the seed (:func:`~agentgym.trainers.sft.train.batch_stream` replays it up to the step), so
a resumed run takes the same steps as one that was never stopped. Writing a checkpoint
draws from no RNG and changes no state of the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from agentgym import CheckpointError
from agentgym.generation import adapter_state_dict, quiet_hf_loading
from agentgym.trainers.checkpoint import load_checkpoint, resume_checkpoint, save_checkpoint
from agentgym.trainers.sft.config import SFTConfig

#: the settings the example order depends on, kept in ``trainer_state.json``
ORDER_KEYS = ("seed", "examples", "batch_size", "group_by_length")


def checkpoints_dir(out: str | Path) -> Path:
    """Where a run folder's checkpoints go (``<out>/checkpoints``, as the trainer's)."""
    return Path(out) / "checkpoints"


def data_order(cfg: SFTConfig, examples: int) -> dict[str, int]:
    """What the order of the examples depends on (:data:`ORDER_KEYS`)."""
    t = cfg.train
    return {
        "seed": cfg.run.seed,
        "examples": examples,
        "batch_size": t.batch_size,
        "group_by_length": t.group_by_length,
    }


def find_checkpoint(out: str | Path, say: Callable[[str], None]) -> tuple[Path, int] | None:
    """The checkpoint ``--resume`` continues from and its step: the newest intact one
    (damaged ones are named and passed over), or ``None`` when the folder has none.

    Raises:
        CheckpointError: there are checkpoints, but none is intact.
    """
    root = checkpoints_dir(out)
    ckpt, damaged = resume_checkpoint(root)
    for msg in damaged:
        say(f"[agentgym sft] --resume: {msg}")
    if ckpt is None and damaged:
        raise CheckpointError(
            f"--resume: no intact checkpoint in {root} (see above). Start a new run folder, "
            "or --overwrite this one."
        )
    if ckpt is None:
        return None
    if damaged:
        say(f"[agentgym sft] --resume: continuing from {ckpt.name}, the newest intact.")
    return ckpt, int(json.loads((ckpt / "trainer_state.json").read_text())["step"])


def save_sft_checkpoint(
    cfg: SFTConfig,
    step: int,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    order: dict[str, int],
    total_steps: int,
) -> Path:
    """Write the checkpoint of ``step`` into the run folder (atomically; the oldest
    beyond ``run.keep_checkpoints`` are pruned)."""
    lora = cfg.lora.enabled
    with quiet_hf_loading():  # the whole model's "Writing model shards" bar
        return save_checkpoint(
            checkpoints_dir(cfg.run.output_dir),
            step,
            model=model,
            optimizer_state=optimizer.state_dict(),
            adapter_state=adapter_state_dict(model) if lora else None,
            trainer_state={"command": "sft", "total_steps": total_steps, "data_order": order},
            lora=lora,
            keep=cfg.run.keep_checkpoints,
        )


def load_sft_checkpoint(
    ckpt: Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    lora: bool,
    order: dict[str, int],
    say: Callable[[str], None],
) -> int:
    """Put the weights, AdamW's state and the RNG states of ``ckpt`` back; returns its
    step. A different example order than the checkpoint's (another seed, batch size,
    number of examples) is said: the run continues on the new order."""
    state: dict[str, Any] = load_checkpoint(ckpt, model=model, optimizer=optimizer, lora=lora)
    saved = state.get("data_order") or {}
    changed = [
        f"{k} {saved[k]} -> {order[k]}" for k in ORDER_KEYS if saved.get(k, order[k]) != order[k]
    ]
    if changed:
        say(
            f"[agentgym sft] --resume: the examples' order differs from the checkpoint's "
            f"({', '.join(changed)}); the resumed steps follow the new order."
        )
    return int(state["step"])
