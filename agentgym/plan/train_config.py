"""A trainer config with the planner's ``plan:`` section typed: :class:`PlanConfig`.

The trainer's :class:`~agentgym.trainers.TrainConfig` keeps ``plan:`` as written (the
trainer never reads it, and the trainer layer sits below the planner). Loading a file as
:class:`PlanConfig` types that section as :class:`~agentgym.plan.PlanSettings`, so a
misspelt or bad ``plan.*`` key fails when the config loads, with "did you mean", and
``--print-config`` lists every planner key with its default. ``agentgym plan`` and
``agentgym train`` load it; a :class:`PlanConfig` is a :class:`TrainConfig`.

This module imports the trainer's config (and with it torch), so the package exports it
lazily: ``import agentgym.plan`` stays light.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentgym.plan.config import PlanSettings
from agentgym.trainers import TrainConfig


@dataclass
class PlanConfig(TrainConfig):
    """``agentgym plan`` (and ``agentgym train``): the trainer's sections, and ``plan:``
    as :class:`~agentgym.plan.PlanSettings` (docs/plan.md)."""

    plan: PlanSettings = field(default_factory=PlanSettings)  # type: ignore[assignment]
