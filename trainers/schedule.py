"""Learning-rate schedules: a linear warm-up, then constant or a decay to ``min_ratio x lr``.

The learner sets the policy's rate from one of these at every optimizer step
(:meth:`~agentgym.trainers.learner.Learner.step`), for SFT and RL alike
(``optim.schedule``; SFT's ``train.schedule``):

* ``constant``: ``lr`` after the warm-up (the RL trainer's default).
* ``cosine``: half a cosine from ``lr`` down to the floor over the steps after the warm-up.
* ``wsd`` (warm-up, stable, decay): ``lr`` held until the last ``decay_fraction`` of the
  run, then a straight line down to the floor. A run spends longer at the full rate, and
  the decay at the end still anneals.

Each is a pure function of the step and the run's length, so a resumed run gets the rates
of an uninterrupted one.
"""

from __future__ import annotations

import math

SCHEDULES = ("constant", "cosine", "wsd")


def lr_at(
    step: int,
    total_steps: int,
    *,
    lr: float,
    warmup_steps: int,
    schedule: str = "cosine",
    min_ratio: float = 0.1,
    decay_fraction: float = 0.2,
) -> float:
    """The learning rate of optimizer step ``step`` (0-based) of ``total_steps``."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return lr
    if schedule == "cosine":
        frac = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))
    decay_start = total_steps - max(1, round(decay_fraction * total_steps))
    if step < decay_start:
        return lr
    frac = min(1.0, (step - decay_start + 1) / max(1, total_steps - decay_start))
    return lr * (1 - (1 - min_ratio) * frac)
