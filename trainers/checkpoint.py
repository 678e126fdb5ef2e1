"""Checkpoints: adapter (peft format, safetensors), optimizer, RNG states, step.

Layout of ``<run>/checkpoints/step_000042/``::

    adapter/adapter_model.safetensors, adapter/adapter_config.json   (peft format)
    model/                    (full fine-tuning only: the whole model, safetensors)
    optimizer.pt              optimizer state (sharded runs: optimizer.rank<r>-of-<n>.pt)
    rng.pt                    torch (CPU and every visible GPU), python and numpy RNG states
    trainer_state.json        step, task-seed counter, env-mixing RNG, ...
    checksums.json            every other file's size and SHA-256 (of each 256 MiB chunk
                              for a larger file), written last

A checkpoint is written into a temporary sibling directory and renamed into place, and
``<run>/checkpoints/latest`` (a one-line file naming it) is replaced atomically after
the rename, so a run killed at any moment leaves either the old or the new checkpoint,
never a half-written one. A write that fails (a full disk) removes the temporary folder
and says how much space there is.

What a resume reads is checked against ``checksums.json`` first
(:func:`verify_checkpoint`): a file missing, truncated or changed since (a flipped bit)
is named, and :func:`resume_checkpoint` falls back to the newest checkpoint that is
intact. Old checkpoints are pruned only after a new one is written and summed, so the
newest intact one is never deleted. Every rank sums a share of the checkpoint's files
(:func:`checksums`: files and 256 MiB chunks dealt out over the ranks), so summing a 59 GB
checkpoint of 48 ranks costs each about 1.2 GB of reading, not one rank all of it while
the others wait at the barrier.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentgym import CheckpointError, ConfigError
from agentgym.generation import latest_checkpoint
from agentgym.trainers.distributed import SINGLE, DistInfo, barrier

LATEST = "latest"  # the pointer file (agentgym.generation.latest_checkpoint reads it)
CHECKSUMS = "checksums.json"


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def rng_state() -> dict[str, Any]:
    """Every RNG a run draws from: torch's CPU generator, each visible GPU's (``cuda``,
    when CUDA is present), Python's and numpy's."""
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back a :func:`rng_state`. The GPUs' states are restored when this process sees
    as many GPUs as the one that saved them (a checkpoint moved to another machine or
    written on CPU leaves them as they are)."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


def _optimizer_file(rank: int, world: int) -> str:
    return "optimizer.pt" if world == 1 else f"optimizer.rank{rank}-of-{world}.pt"


def save_checkpoint(
    ckpt_dir: str | Path,
    step: int,
    *,
    model: Any,
    optimizer_state: dict[str, Any],
    trainer_state: dict[str, Any],
    lora: bool,
    keep: int = 2,
    adapter_state: dict[str, torch.Tensor] | None = None,
    model_state: dict[str, torch.Tensor] | None = None,
    dist: DistInfo = SINGLE,
    extra_tensors: dict[str, dict[str, torch.Tensor]] | None = None,
) -> Path:
    """Write ``step_<step>`` atomically, point ``latest`` at it, prune old ones.

    Every rank must call it (it synchronises the ranks). Rank 0 writes the adapter,
    RNG and trainer state; every rank writes its own optimizer shard
    (``optimizer.rank<r>-of-<world>.pt``; ``optimizer.pt`` on a single process).
    Multi-node runs need ``run.output_dir`` on a shared file system.

    Args:
        model: the trained model, for the configs written beside the weights (the
            adapter's peft config, the model's Hugging Face config).
        adapter_state: the gathered LoRA weights (peft naming). Required when the
            model is sharded; without it a LoRA model is saved with ``save_pretrained``.
        model_state: full fine-tuning's weights (the learner's); without them the
            model's own are saved.
        extra_tensors: more gathered tensors by name (the critic's), each written by rank
            0 as ``<name>.safetensors`` (read back with :func:`read_extra_tensors`).
    """
    root = Path(ckpt_dir)
    name = f"step_{step:06d}"
    tmp = root / f".{name}.tmp"
    try:
        _write_files(
            tmp,
            model,
            optimizer_state,
            trainer_state,
            lora,
            (adapter_state, model_state),
            dist,
            step,
            extra_tensors,
        )
    except Exception as e:
        if dist.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
        raise _write_error(root, name, e) from e
    return _publish(root, name, keep, dist)


def _write_files(
    tmp: Path,
    model: Any,
    optimizer_state: dict[str, Any],
    trainer_state: dict[str, Any],
    lora: bool,
    weights: tuple[dict[str, torch.Tensor] | None, dict[str, torch.Tensor] | None],
    dist: DistInfo,
    step: int,
    extra_tensors: dict[str, dict[str, torch.Tensor]] | None,
) -> None:
    """Every file of a checkpoint into ``tmp``, ``checksums.json`` last (rank 0 writes
    all but the optimizer shards, which each rank writes)."""
    root = tmp.parent
    adapter_state, model_state = weights
    if dist.is_main:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        if lora and adapter_state is not None:
            from safetensors.torch import save_file

            (tmp / "adapter").mkdir()
            model.peft_config["default"].save_pretrained(str(tmp / "adapter"))
            save_file(
                {k: v.contiguous() for k, v in adapter_state.items()},
                str(tmp / "adapter" / "adapter_model.safetensors"),
            )
        elif lora:
            model.save_pretrained(str(tmp / "adapter"), safe_serialization=True)
        else:
            model.save_pretrained(
                str(tmp / "model"), state_dict=model_state, safe_serialization=True
            )
        for extra, tensors in (extra_tensors or {}).items():
            from safetensors.torch import save_file

            save_file(
                {k: v.contiguous() for k, v in tensors.items()}, str(tmp / f"{extra}.safetensors")
            )
        torch.save(rng_state(), tmp / "rng.pt")
        (tmp / "trainer_state.json").write_text(
            json.dumps({**trainer_state, "step": step, "world_size": dist.world_size}, indent=1)
        )
        for f in sorted(tmp.rglob("*")):  # what this rank wrote reaches the disk
            if f.is_file():
                _fsync(f)
    barrier(dist)
    shard = tmp / _optimizer_file(dist.rank, dist.world_size)
    torch.save(optimizer_state, shard)
    _fsync(shard)
    barrier(dist)
    sums = checksums(tmp, dist)
    if dist.is_main:
        _atomic_write_text(tmp / CHECKSUMS, json.dumps(sums, indent=1) + "\n")


def _publish(root: Path, name: str, keep: int, dist: DistInfo) -> Path:
    """Rename the written checkpoint into place, point ``latest`` at it, prune old ones."""
    final, tmp = root / name, root / f".{name}.tmp"
    if dist.is_main:
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _atomic_write_text(root / LATEST, name + "\n")
        # older ones beyond ``keep``, and any newer one: a resume that fell back past a
        # damaged checkpoint has replaced that history
        ckpts = sorted(p for p in root.glob("step_*") if p.is_dir() and p.name <= name)
        newer = [p for p in root.glob("step_*") if p.is_dir() and p.name > name]
        for old in ckpts[:-keep] + newer:
            shutil.rmtree(old, ignore_errors=True)
    barrier(dist)
    return final


#: files above this size are summed piece by piece (``sha256_chunks``), the pieces shared
#: out over the ranks
CHUNK_BYTES = 256 << 20


def _fsync(path: Path) -> None:
    with path.open("rb") as fh:
        os.fsync(fh.fileno())


def _pieces(root: Path) -> list[tuple[str, int, int]]:
    """``(file, chunk, size)`` of every file under ``root``, in a fixed order: a file of
    at most :data:`CHUNK_BYTES` is one piece (chunk -1: summed whole)."""
    out = []
    for f in sorted(p for p in root.rglob("*") if p.is_file() and p.name != CHECKSUMS):
        rel, size = f.relative_to(root).as_posix(), f.stat().st_size
        if size <= CHUNK_BYTES:
            out.append((rel, -1, size))
        else:
            out += [(rel, i, size) for i in range(-(-size // CHUNK_BYTES))]
    return out


def _sum_piece(root: Path, rel: str, chunk: int) -> str:
    """SHA-256 of a file, or of its chunk ``chunk`` (:data:`CHUNK_BYTES` from
    ``chunk * CHUNK_BYTES``)."""
    h = hashlib.sha256()
    with (root / rel).open("rb") as f:
        left = -1
        if chunk >= 0:
            f.seek(chunk * CHUNK_BYTES)
            left = CHUNK_BYTES
        while left != 0:
            block = f.read(1 << 20 if left < 0 else min(1 << 20, left))
            if not block:
                break
            h.update(block)
            left = left - len(block) if left > 0 else left
    return h.hexdigest()


def checksums(root: Path, dist: DistInfo = SINGLE) -> dict[str, dict[str, Any]]:
    """Every file's size and SHA-256 under ``root`` (a file above :data:`CHUNK_BYTES`: the
    SHA-256 of each chunk), summed by all ranks together: each sums every
    ``world_size``-th piece and the sums are exchanged (every rank calls it, after every
    file is written). No rank reads more than its share, so a checkpoint of tens of GB is
    summed in the time of one share, not by one rank while the others wait."""
    from agentgym.trainers.distributed import all_gather_objects

    pieces = _pieces(root)
    mine = {
        (rel, chunk): _sum_piece(root, rel, chunk)
        for rel, chunk, _ in pieces[dist.rank :: dist.world_size]
    }
    done: dict[tuple[str, int], str] = {}
    for part in all_gather_objects(mine, dist):
        done.update(part)
    sums: dict[str, dict[str, Any]] = {}
    for rel, chunk, size in pieces:
        entry = sums.setdefault(rel, {"bytes": size})
        if chunk < 0:
            entry["sha256"] = done[(rel, chunk)]
        else:
            entry["chunk_bytes"] = CHUNK_BYTES
            entry.setdefault("sha256_chunks", []).append(done[(rel, chunk)])
    return sums


def _digest(path: Path, want: Mapping[str, Any]) -> str | None:
    """Where ``path`` differs from its checksum entry ``want`` (same size assumed): None
    when it matches, else which part differs."""
    if "sha256_chunks" not in want:
        return None if _sum_piece(path.parent, path.name, -1) == want["sha256"] else "its SHA-256"
    step = int(want["chunk_bytes"])
    if step != CHUNK_BYTES:  # written with another chunk size: sum with that one
        return _digest_chunks(path, want["sha256_chunks"], step)
    for i, hexdigest in enumerate(want["sha256_chunks"]):
        if _sum_piece(path.parent, path.name, i) != hexdigest:
            return f"the SHA-256 of its bytes {i * step:,}-{(i + 1) * step - 1:,}"
    return None


def _digest_chunks(path: Path, digests: list[str], step: int) -> str | None:
    with path.open("rb") as f:
        for i, hexdigest in enumerate(digests):
            if hashlib.sha256(f.read(step)).hexdigest() != hexdigest:
                return f"the SHA-256 of its bytes {i * step:,}-{(i + 1) * step - 1:,}"
    return None


def _write_error(root: Path, name: str, e: Exception) -> CheckpointError:
    """What a failed checkpoint write tells the user (a full disk said as such)."""
    try:
        free = shutil.disk_usage(root if root.exists() else root.parent).free
    except OSError:
        free = -1
    full = (isinstance(e, OSError) and e.errno == errno.ENOSPC) or "unexpected pos" in str(e)
    if full or 0 <= free < 64 << 20:
        return CheckpointError(
            f"no space left on device for checkpoint {name} in {root} ({free / 2**20:.0f} MiB "
            f"free; the last checkpoint's size is what it needs). The partial checkpoint was "
            "removed; free space or lower run.keep_checkpoints, then continue with --resume."
        )
    return CheckpointError(f"writing checkpoint {name} in {root} failed: {e}")


def verify_checkpoint(path: str | Path) -> None:
    """Check every file of a checkpoint against its ``checksums.json`` (size, then
    SHA-256). A checkpoint written before checksums existed passes unchecked.

    Raises:
        CheckpointError: naming the checkpoint and the first file that is missing,
            truncated or changed.
    """
    path = Path(path)
    sums_file = path / CHECKSUMS
    if not sums_file.is_file():
        return
    try:
        sums = json.loads(sums_file.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path}: {CHECKSUMS} is unreadable ({e}).") from e
    for rel, want in sorted(sums.items()):
        f = path / rel
        if not f.is_file():
            raise CheckpointError(f"checkpoint {path}: {rel} is missing.")
        size = f.stat().st_size
        if size != want["bytes"]:
            raise CheckpointError(
                f"checkpoint {path}: {rel} is {size} bytes, {want['bytes']} were "
                "written (truncated or replaced)."
            )
        differs = _digest(f, want)
        if differs is not None:
            raise CheckpointError(
                f"checkpoint {path}: {rel} changed since it was written "
                f"({differs} differs: a damaged disk or an edit)."
            )


def resume_checkpoint(ckpt_dir: str | Path) -> tuple[Path | None, list[str]]:
    """The checkpoint a resume starts from: the one ``latest`` names if it is intact,
    else the newest intact one (:func:`verify_checkpoint`). Returns it (None when there
    is none) and a message for each damaged checkpoint passed over."""
    root = Path(ckpt_dir)
    candidates = sorted(
        (p for p in root.glob("step_*") if (p / "trainer_state.json").is_file()), reverse=True
    )
    first = latest_checkpoint(root)
    if first is not None:
        candidates = [first, *(p for p in candidates if p != first)]
    skipped = []
    for cand in candidates:
        try:
            verify_checkpoint(cand)
        except CheckpointError as e:
            skipped.append(f"{e} Passing over it.")
            continue
        return cand, skipped
    return None, skipped


def read_extra_tensors(path: str | Path, name: str) -> dict[str, torch.Tensor]:
    """The tensors :func:`save_checkpoint` wrote as ``extra_tensors[name]``."""
    f = Path(path) / f"{name}.safetensors"
    if not f.is_file():
        raise ConfigError(
            f"{path} holds no {name} state ({f.name} is missing): it was written by a run "
            f"without a {name}; resume it with the config it was written with, or start a "
            "new run folder."
        )
    from safetensors.torch import load_file

    return load_file(str(f))


class LazyTensors(Mapping[str, torch.Tensor]):
    """The tensors of a safetensors file, each read from disk when it is asked for (a
    rank of a device mesh then holds one whole tensor at a time, and reads only those of
    its stage). A tensor that cannot be read raises :class:`CheckpointError`, naming it."""

    def __init__(self, path: Path, label: str) -> None:
        from safetensors import safe_open

        self.path, self.label = path, label
        with safe_open(str(path), "pt") as f:
            self._keys = list(f.keys())
        self._known = set(self._keys)

    def __getitem__(self, key: str) -> torch.Tensor:
        if key not in self._known:
            raise KeyError(key)
        from safetensors import safe_open

        try:
            with safe_open(str(self.path), "pt") as f:
                return f.get_tensor(key)
        except Exception as e:
            raise CheckpointError(
                f"{self.label}: tensor {key} cannot be read ({type(e).__name__}: {e}). Resume "
                "from an earlier checkpoint (remove this folder) or start a new run."
            ) from e

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def read_checkpoint(
    path: str | Path,
    *,
    lora: bool,
    dist: DistInfo = SINGLE,
    optimizer: str = "all",
    lazy_adapter: bool = False,
) -> tuple[Mapping[str, torch.Tensor], list[dict[str, Any] | None], dict[str, Any]]:
    """The weights (adapter or full model), the ranks' optimizer states, the trainer state.

    Restores the RNG states as a side effect. A sharded checkpoint must be resumed with
    the number of processes that wrote it.

    Args:
        optimizer: ``all`` (every rank's file, in rank order: ZeRO-2 merges them) or
            ``own`` (this rank's file alone, at its index, None at the others': a rank
            of a sharded learner needs no other rank's shard).
        lazy_adapter: the adapter as :class:`LazyTensors` (read tensor by tensor when the
            learner puts it into its shares) instead of read whole.
    """
    path = Path(path)
    if not (path / "trainer_state.json").is_file():
        raise ConfigError(f"{path} is not a complete checkpoint (no trainer_state.json).")
    state = json.loads((path / "trainer_state.json").read_text())
    written_by = int(state.get("world_size", 1))
    if written_by != dist.world_size:
        raise ConfigError(
            f"{path} was written by {written_by} process(es) but this run has "
            f"{dist.world_size}: resume with --nproc {written_by} (optimizer state is sharded)."
        )
    from safetensors.torch import load_file

    def read(rel: str, load: Any) -> Any:
        try:
            return load(path / rel)
        except Exception as e:  # a truncated or damaged file: name it
            raise CheckpointError(
                f"checkpoint {path}: {rel} cannot be read ({type(e).__name__}: {e}). Resume "
                "from an earlier checkpoint (remove this folder) or start a new run."
            ) from e

    def torch_file(f: Path) -> Any:
        return torch.load(f, weights_only=False, map_location="cpu")

    if lora:
        rel = "adapter/adapter_model.safetensors"
        load = (lambda f: LazyTensors(f, f"checkpoint {path}: {rel}")) if lazy_adapter else None
        weights = read(rel, load or (lambda f: load_file(str(f))))
    else:
        weights = {}
        for f in sorted((path / "model").glob("*.safetensors")):
            weights.update(read(f"model/{f.name}", lambda f: load_file(str(f))))
    # to host memory (the tensors were saved on the writing rank's GPU); the optimizer
    # moves its state onto its parameters' device when it loads
    ranks = range(written_by) if optimizer == "all" else [dist.rank]
    optim: list[dict[str, Any] | None] = [None] * written_by
    for r in ranks:
        optim[r] = read(_optimizer_file(r, written_by), torch_file)
    set_rng_state(read("rng.pt", torch_file))
    return weights, optim, state
