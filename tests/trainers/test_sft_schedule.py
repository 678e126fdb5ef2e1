"""SFT learning-rate schedules: warm-up, then cosine or warm-up-stable-decay to the floor."""

from __future__ import annotations

import itertools
import math

import pytest

from agentgym import UnknownNameError, load_config
from agentgym.trainers.sft import SFTConfig, lr_at


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
