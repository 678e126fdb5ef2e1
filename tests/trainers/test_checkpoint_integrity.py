"""Checkpoints and run records a run can trust (issue 35): checksums verified on resume
with a fall-back to the newest intact checkpoint, damaged files named, a full disk said as
such, the step's metrics row written before the checkpoint that marks the step done, and
record files never rewritten in place."""

from __future__ import annotations

import errno
import json

import pytest
from test_loop import _cfg

from agentgym import CheckpointError
from agentgym.trainers.checkpoint import (
    CHECKSUMS,
    read_checkpoint,
    resume_checkpoint,
    verify_checkpoint,
)
from agentgym.trainers.logging import JsonlWriter, read_jsonl
from agentgym.trainers.loop import DAPOTrainer


def _flip(path, at: int = 64) -> None:
    """Flip four bytes of ``path`` in place (a damaged disk)."""
    data = bytearray(path.read_bytes())
    for i in range(at, at + 4):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture
def two_checkpoints(tmp_path, toy_envs_registered):
    """A run folder with the checkpoints of steps 1 and 2."""
    DAPOTrainer(_cfg(tmp_path, "run.max_steps=2", "run.save_every=1")).train()
    return tmp_path / "run" / "checkpoints"


def test_a_checkpoint_carries_the_sums_of_all_its_files(two_checkpoints):
    step2 = two_checkpoints / "step_000002"
    sums = json.loads((step2 / CHECKSUMS).read_text())
    files = {p.relative_to(step2).as_posix() for p in step2.rglob("*") if p.is_file()}
    assert set(sums) == files - {CHECKSUMS}
    assert "adapter/adapter_model.safetensors" in sums and "optimizer.pt" in sums
    verify_checkpoint(step2)  # intact


def test_a_flipped_bit_is_named_and_resume_falls_back_to_the_intact_one(
    two_checkpoints, tmp_path, capsys
):
    _flip(two_checkpoints / "step_000002" / "adapter" / "adapter_model.safetensors")
    with pytest.raises(CheckpointError, match=r"adapter_model\.safetensors changed"):
        verify_checkpoint(two_checkpoints / "step_000002")
    ckpt, damaged = resume_checkpoint(two_checkpoints)
    assert ckpt.name == "step_000001" and len(damaged) == 1
    resumed = DAPOTrainer(_cfg(tmp_path, "run.max_steps=3", "run.save_every=1"), resume=True)
    assert resumed.step == 1
    assert "step_000002" in capsys.readouterr().err
    resumed.train()
    # the history after the intact checkpoint was redone and saved again, intact
    for step in (2, 3):
        verify_checkpoint(two_checkpoints / f"step_{step:06d}")
    rows = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "charts/reward" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]


def test_a_truncated_file_is_named_with_its_checkpoint(two_checkpoints):
    rng = two_checkpoints / "step_000002" / "rng.pt"
    rng.write_bytes(rng.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"step_000002: rng.pt is 100 bytes"):
        verify_checkpoint(two_checkpoints / "step_000002")
    # without its sums (an older checkpoint) the read itself names the file
    (two_checkpoints / "step_000002" / CHECKSUMS).unlink()
    with pytest.raises(CheckpointError, match=r"step_000002: rng.pt cannot be read"):
        read_checkpoint(two_checkpoints / "step_000002", lora=True)


def test_no_intact_checkpoint_stops_the_resume(two_checkpoints, tmp_path):
    for step in (1, 2):
        _flip(two_checkpoints / f"step_{step:06d}" / "optimizer.pt")
    with pytest.raises(CheckpointError, match="no intact checkpoint"):
        DAPOTrainer(_cfg(tmp_path, "run.max_steps=3"), resume=True)


def test_a_full_disk_is_said_and_leaves_no_temporary_folder(two_checkpoints, tmp_path, monkeypatch):
    import agentgym.trainers.checkpoint as checkpoint

    trainer = DAPOTrainer(_cfg(tmp_path, "run.max_steps=3"), resume=True)
    real_save = checkpoint.torch.save

    def full(obj, f, *a, **kw):
        if str(f).endswith("optimizer.pt"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *a, **kw)

    monkeypatch.setattr(checkpoint.torch, "save", full)
    trainer.step = 3
    with pytest.raises(CheckpointError, match="no space left on device for checkpoint step_000003"):
        trainer.save()
    trainer.close()
    assert not list(two_checkpoints.glob(".step_*"))
    assert resume_checkpoint(two_checkpoints)[0].name == "step_000002"


def test_the_metrics_row_is_written_before_the_checkpoint(tmp_path, toy_envs_registered):
    trainer = DAPOTrainer(_cfg(tmp_path, "run.max_steps=2", "run.save_every=1"))
    log = tmp_path / "run" / "metrics.jsonl"
    seen = []

    def save():  # the run is killed while it writes step 2's checkpoint
        seen.append([r["step"] for r in read_jsonl(log) if "charts/reward" in r])
        if trainer.step == 2:
            raise KeyboardInterrupt

    trainer.save = save
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert seen == [[1], [1, 2]]
    phases = [r["phase"] for r in read_jsonl(tmp_path / "run" / "timeline.jsonl")]
    assert "checkpoint" in phases


def test_a_resume_rewrites_a_record_file_whole_or_not_at_all(tmp_path, monkeypatch):
    log = tmp_path / "metrics.jsonl"
    rows = [{"step": i, "x": i} for i in range(1, 6)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the process dies before the new file takes the old's place

    monkeypatch.setattr("agentgym.trainers.logging.os.replace", killed)
    with pytest.raises(KeyboardInterrupt):
        JsonlWriter(log, truncate_after_step=3)
    assert read_jsonl(log) == rows  # untouched
    monkeypatch.undo()
    JsonlWriter(log, truncate_after_step=3)
    assert read_jsonl(log) == rows[:3]


def test_a_large_file_is_summed_chunk_by_chunk_and_the_damaged_chunk_named(tmp_path, monkeypatch):
    import agentgym.trainers.checkpoint as checkpoint

    monkeypatch.setattr(checkpoint, "CHUNK_BYTES", 1000)
    (tmp_path / "big.pt").write_bytes(bytes(range(256)) * 14)  # 3,584 bytes: 4 chunks
    (tmp_path / "small.json").write_text("{}")
    sums = checkpoint.checksums(tmp_path)
    assert len(sums["big.pt"]["sha256_chunks"]) == 4 and sums["big.pt"]["chunk_bytes"] == 1000
    assert "sha256" in sums["small.json"]
    (tmp_path / CHECKSUMS).write_text(json.dumps(sums))
    verify_checkpoint(tmp_path)
    _flip(tmp_path / "big.pt", at=2500)
    with pytest.raises(CheckpointError, match=r"big.pt changed .*bytes 2,000-2,999"):
        verify_checkpoint(tmp_path)


def test_every_rank_sums_a_share_of_the_checkpoint(tmp_path, monkeypatch):
    """The pieces (whole small files, chunks of large ones) dealt out over 4 ranks: each
    sums about a quarter of the bytes, and together every piece once."""
    import agentgym.trainers.checkpoint as checkpoint

    monkeypatch.setattr(checkpoint, "CHUNK_BYTES", 1000)
    (tmp_path / "adapter.safetensors").write_bytes(b"a" * 9_500)  # the gathered adapter
    for r in range(4):
        (tmp_path / f"optimizer.rank{r}-of-4.pt").write_bytes(b"o" * 900)
    pieces = checkpoint._pieces(tmp_path)
    shares = [pieces[r::4] for r in range(4)]
    assert sorted(p for share in shares for p in share) == sorted(pieces)
    read = [sum(min(size - max(c, 0) * 1000, 1000) if c >= 0 else size for _, c, size in share)
            for share in shares]  # fmt: skip
    assert max(read) <= 1.3 * sum(read) / 4


class _Counter:
    """A checkpoint part: a number it saves and restores."""

    def __init__(self, n: int) -> None:
        self.n = n

    def state_dict(self) -> dict:
        return {"counter": self.n}

    def load_state_dict(self, state: dict) -> None:
        self.n = state["counter"]


def test_checkpointer_saves_and_restores_the_learner_and_registered_parts(tmp_path, tokenizer):
    """A full fine-tuning model's weights go through the learner's ``state_dict`` (no
    adapter), with its optimizer and step count, the RNGs and each registered part."""
    import torch
    from conftest import TINY_QWEN

    from agentgym.generation import build_preset
    from agentgym.trainers.checkpointer import Checkpointer
    from agentgym.trainers.config import AlgorithmConfig, OptimConfig
    from agentgym.trainers.learner import Learner

    def learner(seed: int) -> tuple[torch.nn.Module, Learner]:
        model = build_preset("tiny-qwen2", tokenizer, seed=seed, overrides=TINY_QWEN)
        return model, Learner(model, AlgorithmConfig(), OptimConfig(lr=0.1), pad_id=0, lora=False)

    model, trained = learner(0)
    ids = torch.tensor([[1, 2, 3, 4]])
    model(ids, labels=ids).loss.backward()
    trained.step()
    saved = Checkpointer(tmp_path / "ck", trained, model, keep=2, say=lambda _m: None)
    part = _Counter(7)
    saved.register("counter", part)
    with pytest.raises(ValueError, match="registered already"):
        saved.register("counter", part)
    saved.save(3)
    draw = torch.rand(3)  # the RNG state at the save, drawn from after it

    fresh_model, fresh = learner(1)
    assert not torch.equal(fresh_model.lm_head.weight, model.lm_head.weight)
    restored = Checkpointer(tmp_path / "ck", fresh, fresh_model, keep=2, say=print)
    restored.register("counter", fresh_part := _Counter(0))
    ckpt = restored.find()
    assert ckpt is not None and restored.restore(ckpt) == 3
    assert (fresh_part.n, fresh.updates) == (7, 1)
    assert torch.equal(torch.rand(3), draw)
    for (name, a), b in zip(
        model.state_dict().items(), fresh_model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
    state = fresh.optimizer.state_dict()["state"]
    assert state and all(int(s["step"]) == 1 for s in state.values())
    # two parts that would write the same key of trainer_state.json: refused at the save
    restored.register("another", _Counter(1))
    with pytest.raises(ValueError, match="'counter' and 'another' both save the key"):
        restored.save(4)
