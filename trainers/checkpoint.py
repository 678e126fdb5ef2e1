"""Checkpoints: adapter (peft format, safetensors), optimizer, RNG states, step.

Layout of ``<run>/checkpoints/step_000042/``::

    adapter/adapter_model.safetensors, adapter/adapter_config.json   (peft format)
    model/                    (full fine-tuning only: the whole model, safetensors)
    optimizer.pt              optimizer state
    rng.pt                    torch, python and numpy RNG states
    trainer_state.json        step, task-seed counter, env-mixing RNG, ...

A checkpoint is written into a temporary sibling directory and renamed into place, and
``<run>/checkpoints/latest`` (a one-line file naming it) is replaced atomically after
the rename, so a run killed at any moment leaves either the old or the new checkpoint,
never a half-written one.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentgym.errors import ConfigError

LATEST = "latest"


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def rng_state() -> dict[str, Any]:
    return {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def save_checkpoint(
    ckpt_dir: str | Path,
    step: int,
    *,
    model: Any,
    optimizer: torch.optim.Optimizer,
    trainer_state: dict[str, Any],
    lora: bool,
    keep: int = 2,
) -> Path:
    """Write ``step_<step>`` atomically, point ``latest`` at it, prune old ones."""
    root = Path(ckpt_dir)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:06d}"
    final = root / name
    tmp = root / f".{name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    if lora:
        model.save_pretrained(str(tmp / "adapter"), safe_serialization=True)
    else:
        model.save_pretrained(str(tmp / "model"), safe_serialization=True)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(rng_state(), tmp / "rng.pt")
    (tmp / "trainer_state.json").write_text(json.dumps({**trainer_state, "step": step}, indent=1))
    for f in tmp.rglob("*"):
        if f.is_file():
            with f.open("rb") as fh:
                os.fsync(fh.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _atomic_write_text(root / LATEST, name + "\n")
    ckpts = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in ckpts[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(ckpt_dir: str | Path) -> Path | None:
    """The checkpoint ``latest`` names, or the newest complete one, or None."""
    root = Path(ckpt_dir)
    pointer = root / LATEST
    if pointer.is_file():
        cand = root / pointer.read_text().strip()
        if (cand / "trainer_state.json").is_file():
            return cand
    done = sorted(p for p in root.glob("step_*") if (p / "trainer_state.json").is_file())
    return done[-1] if done else None


def load_checkpoint(
    path: str | Path, *, model: Any, optimizer: torch.optim.Optimizer, lora: bool
) -> dict[str, Any]:
    """Restore model/adapter weights, optimizer and RNG states; returns the trainer state."""
    path = Path(path)
    if not (path / "trainer_state.json").is_file():
        raise ConfigError(f"{path} is not a complete checkpoint (no trainer_state.json).")
    if lora:
        from safetensors.torch import load_file

        from agentgym.trainers.models import load_adapter_state_dict

        load_adapter_state_dict(
            model, load_file(str(path / "adapter" / "adapter_model.safetensors"))
        )
    else:
        from safetensors.torch import load_file

        state = {}
        for f in sorted((path / "model").glob("*.safetensors")):
            state.update(load_file(str(f)))
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected:
            raise ConfigError(f"checkpoint weights do not fit the model: {unexpected[:5]}")
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    set_rng_state(torch.load(path / "rng.pt", weights_only=False))
    return json.loads((path / "trainer_state.json").read_text())
