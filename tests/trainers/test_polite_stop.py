"""SIGTERM / Ctrl-C to a training run (issue 35): the first lets the step in progress
finish, saves a checkpoint and stops; the run then resumes from that step."""

from __future__ import annotations

import os
import signal
import time

import pytest
from test_loop import _cfg

from agentgym.health import RunStopped
from agentgym.trainers.checkpoint import resume_checkpoint
from agentgym.trainers.logging import read_jsonl
from agentgym.trainers.loop import DAPOTrainer


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_finishes_the_step_saves_and_stops(tmp_path, toy_envs_registered, sig):
    trainer = DAPOTrainer(_cfg(tmp_path, "run.max_steps=4", "run.save_every=10"))
    real_step = trainer.train_step
    before = signal.getsignal(sig)

    def step_then_signal():
        if trainer.step == 1:  # during step 2
            os.kill(os.getpid(), sig)
        return real_step()

    trainer.train_step = step_then_signal
    with pytest.raises(RunStopped, match=f"after step 2 on {sig.name}; its checkpoint is saved"):
        trainer.train()
    assert signal.getsignal(sig) is before  # the usual handler is back
    ckpt, _ = resume_checkpoint(tmp_path / "run" / "checkpoints")
    assert ckpt.name == "step_000002"  # save_every=10 would have saved none
    rows = [
        r["step"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "charts/reward" in r
    ]
    assert rows == [1, 2]
    resumed = DAPOTrainer(_cfg(tmp_path, "run.max_steps=4", "run.save_every=10"), resume=True)
    assert resumed.step == 2
    assert [m["step"] for m in resumed.train()] == [3, 4]


def test_the_exit_status_says_which_signal(tmp_path, toy_envs_registered):
    trainer = DAPOTrainer(_cfg(tmp_path, "run.max_steps=3"))
    real_step = trainer.train_step

    def signalled_step():
        os.kill(os.getpid(), signal.SIGTERM)
        return real_step()

    trainer.train_step = signalled_step
    with pytest.raises(RunStopped) as stopped:
        trainer.train()
    assert stopped.value.exit_code == 128 + signal.SIGTERM


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler as "the usual" one: a pytest-xdist worker may run with
    another installed (the second signal then had that handler's effect instead)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_second_signal_has_its_usual_effect(tmp_path, toy_envs_registered, python_sigint):
    trainer = DAPOTrainer(_cfg(tmp_path, "run.max_steps=3"))
    real_step = trainer.train_step

    def twice():
        os.kill(os.getpid(), signal.SIGINT)
        # the polite handler runs first: two signals that arrive before Python runs a
        # handler are one call of it (the first may land on another of the process's
        # threads, and the main thread runs the handler later)
        deadline = time.monotonic() + 10
        while not trainer.signals.signum and time.monotonic() < deadline:
            time.sleep(0.01)
        assert trainer.signals.signum == signal.SIGINT
        os.kill(os.getpid(), signal.SIGINT)  # Python's own handler: KeyboardInterrupt
        return real_step()

    trainer.train_step = twice
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert (
        not (tmp_path / "run" / "checkpoints").exists()
        or not resume_checkpoint(tmp_path / "run" / "checkpoints")[0]
    )
