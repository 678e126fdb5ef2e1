"""Learning-rate schedules (one for SFT and RL): warm-up, then constant, cosine or
warm-up-stable-decay to the floor; the learner sets them at every step."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from agentgym import ConfigError, UnknownNameError, load_config
from agentgym.trainers import TrainConfig
from agentgym.trainers.config import AlgorithmConfig, OptimConfig
from agentgym.trainers.learner import Learner
from agentgym.trainers.schedule import lr_at
from agentgym.trainers.sft import SFTConfig


def test_cosine_warms_up_then_decays_to_the_floor():
    lrs = [lr_at(s, 100, lr=1.0, warmup_steps=10) for s in range(100)]
    assert lrs[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert lrs[10] == 1.0
    assert lrs[55] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert all(a >= b for a, b in itertools.pairwise(lrs[10:]))  # never rises after warm-up
    assert lr_at(100, 100, lr=1.0, warmup_steps=10) == pytest.approx(0.1)


def test_wsd_holds_the_rate_then_decays_linearly_over_the_last_fraction():
    def at(s):
        return lr_at(s, 100, lr=2.0, warmup_steps=10, schedule="wsd", decay_fraction=0.2)

    assert at(9) == 2.0 and at(10) == 2.0 and at(79) == 2.0  # stable until step 80
    assert [at(s) for s in (80, 89, 99)] == pytest.approx([2.0 - 1.8 / 20, 2.0 - 1.8 / 2, 0.2])
    assert lr_at(99, 100, lr=2.0, warmup_steps=0, schedule="wsd", min_ratio=0.0) == 0.0


def test_schedule_is_checked_at_load():
    with pytest.raises(UnknownNameError, match="wsd"):
        load_config(SFTConfig, None, ["train.schedule=wds"])
    cfg = load_config(SFTConfig, None, ["train.schedule=wsd", "train.decay_fraction=0.3"])
    assert (cfg.train.schedule, cfg.train.decay_fraction) == ("wsd", 0.3)


def test_constant_holds_the_rate_after_the_warm_up():
    lrs = [lr_at(s, 10, lr=0.5, warmup_steps=4, schedule="constant") for s in range(10)]
    assert lrs == pytest.approx([0.125, 0.25, 0.375] + [0.5] * 7)


def _stepped_rates(optim: OptimConfig, total: int, steps: int) -> list[float]:
    """The rates a learner sets over ``steps`` optimizer steps on a one-layer model."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    learner = Learner(model, AlgorithmConfig(), optim, pad_id=0, lora=False, total_updates=total)
    rates = []
    for _ in range(steps):
        model(torch.randn(2, 4)).sum().backward()
        rates.append(learner.step()["lr"])
    return rates


def test_the_learner_runs_the_schedule_for_every_loop():
    """An RL run's ``optim.schedule`` is the same function SFT uses, over the learner's
    optimizer steps; the default keeps the rate after the warm-up."""
    cosine = OptimConfig(lr=1.0, warmup_steps=2, schedule="cosine", min_lr_ratio=0.0)
    expected = [lr_at(s, 6, lr=1.0, warmup_steps=2, min_ratio=0.0) for s in range(6)]
    assert _stepped_rates(cosine, 6, 6) == pytest.approx(expected)
    assert _stepped_rates(OptimConfig(lr=1.0, warmup_steps=2), 0, 4) == [0.5, 1.0, 1.0, 1.0]
    with pytest.raises(ConfigError, match="total_updates"):
        _stepped_rates(cosine, 0, 1)


def test_full_fine_tuning_is_refused_on_more_than_one_process():
    """Its weights are saved and loaded whole; a sharded learner holds shares."""
    from agentgym.trainers.distributed import DistInfo

    with pytest.raises(ConfigError, match=r"lora\.enabled=true"):
        Learner(
            torch.nn.Linear(2, 1),
            AlgorithmConfig(),
            OptimConfig(),
            pad_id=0,
            lora=False,
            dist=DistInfo(rank=0, world_size=2, backend="gloo"),
        )


def test_rl_schedule_is_checked_at_load():
    with pytest.raises(UnknownNameError, match="cosine"):
        load_config(TrainConfig, None, ["optim.schedule=cosin"])
    cfg = load_config(TrainConfig, None, ["optim.schedule=wsd"])
    assert cfg.optim.schedule == "wsd"


def test_an_rl_run_decays_over_its_optimizer_steps(tmp_path, toy_envs_registered):
    """``optim.schedule=cosine`` in ``agentgym train``: the run's length in optimizer
    steps is ``run.max_steps x algorithm.updates_per_batch`` (here 2 x 2)."""
    from test_loop import _cfg

    from agentgym.trainers.loop import DAPOTrainer

    rows = DAPOTrainer(
        _cfg(
            tmp_path,
            "run.max_steps=2",
            "algorithm.updates_per_batch=2",
            "algorithm.dynamic_sampling=false",
            "optim.schedule=cosine",
            "optim.min_lr_ratio=0",
        )
    ).train()
    # each step logs the rate of its last optimizer step: updates 1 and 3 of 0..3
    want = [lr_at(u, 4, lr=0.01, warmup_steps=0, min_ratio=0.0) for u in (1, 3)]
    assert [r["charts/lr"] for r in rows] == pytest.approx(want)
    assert want[1] < want[0] < 0.01
