"""SFT is a run like training (issue 34, finding 3): checkpoints every ``train.save_every``
steps and after the last, a first SIGTERM / Ctrl-C finishes the step, saves and stops,
and ``--resume`` ends with the weights and losses of a run that was never stopped."""

from __future__ import annotations

import json
import os
import random
import signal

import pytest
import torch
from conftest import TINY_QWEN
from safetensors.torch import load_file

from agentgym import ConfigError, UnknownNameError, load_config
from agentgym.health import RunStopped
from agentgym.trainers.checkpoint import resume_checkpoint
from agentgym.trainers.logging import read_jsonl
from agentgym.trainers.sft import SFTConfig, batch_stream, epoch_batches, run_sft
from agentgym.trainers.sft import train as sft_train

STEPS = 7


def _cfg(out, *extra: str) -> SFTConfig:
    return load_config(
        SFTConfig,
        None,
        [
            f"run.output_dir={out}",
            "run.threads=1",
            "run.progress=false",
            "envs=[{id: agentgym-test/EvenChars-v0}]",
            "data.source=oracle",
            "data.num_tasks=10",
            f"train.max_steps={STEPS}",
            "train.batch_size=4",  # 3 batches an epoch: the stops fall inside epochs
            "train.warmup_steps=2",
            f"model.preset_overrides={json.dumps(TINY_QWEN)}",
            "eval.at_ends=true",
            "eval.num_tasks=2",
            "max_tokens=4",
            *extra,
        ],
    )


def _weights(out) -> dict[str, torch.Tensor]:
    return load_file(str(out / "model" / "model.safetensors"))


def _losses(out) -> dict[int, float]:
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "losses/sft" in r]
    steps = [r["step"] for r in rows]
    assert steps == sorted(set(steps)), steps  # every step once
    return {r["step"]: r["losses/sft"] for r in rows}


def _evals(out) -> list[int]:
    return [r["step"] for r in read_jsonl(out / "metrics.jsonl") if "eval/reward" in r]


def _fail_during_step(monkeypatch, step: int, action) -> None:
    """Run ``action`` inside the ``step``-th step's loss (once)."""
    real = sft_train.sft_step
    calls = {"n": 0}

    def loss(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == step:
            action()
        return real(*args, **kwargs)

    monkeypatch.setattr(sft_train, "sft_step", loss)


def _same_run(a, b) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k  # bit for bit
    assert _losses(a) == _losses(b)
    assert _evals(a) == _evals(b) == [0, STEPS]


@pytest.fixture
def straight(tmp_path, toy_envs_registered, capsys):
    """An uninterrupted run (no checkpoint but the last)."""

    def run(*extra: str):
        out = tmp_path / "straight"
        run_sft(_cfg(out, "train.save_every=0", *extra))
        return out, capsys.readouterr().out

    return run


@pytest.mark.parametrize("lora", [False, True])
def test_ctrl_c_saves_after_the_step_and_resume_ends_as_an_uninterrupted_run(
    tmp_path, straight, monkeypatch, lora
):
    extra = ("lora.enabled=true", "lora.r=4") if lora else ()
    ref, _ = straight(*extra)
    out = tmp_path / "stopped"
    before = signal.getsignal(signal.SIGINT)
    _fail_during_step(monkeypatch, 4, lambda: os.kill(os.getpid(), signal.SIGINT))
    with pytest.raises(RunStopped, match=r"after step 4 of 7 on SIGINT.*--resume") as stopped:
        run_sft(_cfg(out, "train.save_every=0", *extra))
    assert stopped.value.exit_code == 128 + signal.SIGINT
    assert signal.getsignal(signal.SIGINT) is before  # the usual handler is back
    ckpt, _ = resume_checkpoint(out / "checkpoints")
    assert ckpt.name == "step_000004"  # save_every=0 would have saved none before the end
    assert (ckpt / ("adapter" if lora else "model")).is_dir()
    assert not (out / "model").exists()
    assert sorted(_losses(out)) == [1, 2, 3, 4]
    monkeypatch.undo()
    run_sft(_cfg(out, "train.save_every=0", *extra), resume=True)
    _same_run(ref, out)


def test_a_killed_run_resumes_from_its_last_periodic_checkpoint(tmp_path, straight, monkeypatch):
    ref, summary = straight()
    # the end of a run, as the trainer's: plots, a summary, the eval table
    assert "trained steps 1-7" in summary and "loss" in summary
    assert "| held-out (2 tasks) | step 0 | step 7 |" in summary
    for png in ("training.png", "eval.png"):
        assert (ref / "plots" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = tmp_path / "killed"

    def kill():
        raise MemoryError("killed")  # no polite stop: the steps since step 4 are lost

    _fail_during_step(monkeypatch, 6, kill)
    with pytest.raises(MemoryError):
        run_sft(_cfg(out, "train.save_every=2"))
    assert sorted(p.name for p in (out / "checkpoints").glob("step_*")) == [
        "step_000002",
        "step_000004",
    ]
    assert sorted(_losses(out)) == [1, 2, 3, 4, 5]  # step 5's row is redone on resume
    monkeypatch.undo()
    run_sft(_cfg(out, "train.save_every=2"), resume=True)
    _same_run(ref, out)
    # the newest two checkpoints are kept (run.keep_checkpoints), the last one included
    assert sorted(p.name for p in (out / "checkpoints").glob("step_*")) == [
        "step_000006",
        "step_000007",
    ]


def test_resuming_a_finished_run_redoes_nothing(tmp_path, straight, monkeypatch):
    ref, _ = straight()
    weights = _weights(ref)
    rows = read_jsonl(ref / "metrics.jsonl")

    def no_step(*args, **kwargs):
        raise AssertionError("a finished run took a step")

    monkeypatch.setattr(sft_train, "sft_step", no_step)
    run_sft(_cfg(ref, "train.save_every=0"), resume=True)
    assert read_jsonl(ref / "metrics.jsonl") == rows  # no second final evaluation
    assert all(torch.equal(weights[k], v) for k, v in _weights(ref).items())


@pytest.mark.parametrize("group_by_length", [0, 3])
def test_the_batch_stream_replays_the_order_of_the_epochs_from_any_step(group_by_length):
    lengths = [random.Random(1).randrange(1, 50) for _ in range(23)]
    rng = random.Random(5)  # the order the loop drew before it could resume: epoch by epoch
    epochs = [b for _ in range(4) for b in epoch_batches(lengths, 4, rng, group_by_length)]
    full = batch_stream(lengths, 4, 5, group_by_length)
    assert [next(full) for _ in epochs] == epochs
    for start in (0, 1, 5, 6, 7, 13):  # 6 batches an epoch
        resumed = batch_stream(lengths, 4, 5, group_by_length, start=start)
        assert [next(resumed) for _ in epochs[start:]] == epochs[start:]


def test_the_checkpoint_period_is_sfts_own_key():
    assert load_config(SFTConfig, None, ["train.save_every=50"]).train.save_every == 50
    assert load_config(SFTConfig, None, []).train.save_every == 200
    with pytest.raises(UnknownNameError, match=r"train\.save_every"):
        load_config(SFTConfig, None, ["run.save_every=50"])
    with pytest.raises(ConfigError, match=r"train\.save_every must be >= 0"):
        load_config(SFTConfig, None, ["train.save_every=-1"])


def test_sigterm_stops_after_the_step_too(tmp_path, toy_envs_registered, monkeypatch):
    out = tmp_path / "termed"
    _fail_during_step(monkeypatch, 2, lambda: os.kill(os.getpid(), signal.SIGTERM))
    with pytest.raises(RunStopped, match="after step 2 of 7 on SIGTERM") as stopped:
        run_sft(_cfg(out, "eval.at_ends=false"))
    assert stopped.value.exit_code == 128 + signal.SIGTERM
    assert resume_checkpoint(out / "checkpoints")[0].name == "step_000002"
