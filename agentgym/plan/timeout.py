"""The collective timeout against the time model: a rollout must not outlast it.

Between two training collectives every rank generates its share of the step and scores
it; the first collective after the rollout waits for the slowest rank. If the planner's
own estimate of that stretch (rollout prefill and decode, environment and reward, engine
sleep and wake) exceeds ``distributed.timeout_s``, the first long rollout of the run
fails with a collective timeout. :func:`check_collective_timeout` says so at start-up,
with the value to set, for every config the planner can size (a ``plan:`` section and
``model.architecture`` or a preset); configs it cannot size are not checked.
"""

from __future__ import annotations

from typing import Any

from agentgym import ConfigError

#: how much longer than the estimate the timeout must be (the estimate is a model)
MARGIN = 1.5

#: the phases of the time model between the last collective of one step's training and
#: the first of the next step's
_ROLLOUT_PHASES = ("rollout: prefill", "rollout: decode", "env/reward", "engine sleep/wake")


def rollout_seconds(cfg: Any) -> float | None:
    """The time model's seconds from the end of one step's training to the start of the
    next (``cfg``: a :class:`~agentgym.plan.PlanConfig`), or None when the planner cannot
    size the config's model."""
    from agentgym.plan.config import plan_inputs, step_spec
    from agentgym.plan.timing import step_time

    if not (cfg.model.architecture or cfg.model.preset):
        return None
    try:
        step = step_time(step_spec(plan_inputs(cfg)))
    except ConfigError:  # a layout or a model the planner does not size
        return None
    return sum(v for k, v in step.phases.items() if k.startswith(_ROLLOUT_PHASES))


def check_collective_timeout(cfg: Any) -> None:
    """Refuse a sharded run whose ``distributed.timeout_s`` is shorter than
    :data:`MARGIN` times the planner's estimate of a rollout (module docstring).

    Raises:
        ConfigError: naming the estimate and the timeout to set.
    """
    if cfg.distributed.strategy == "none":
        return
    seconds = rollout_seconds(cfg)
    if seconds is None:
        return
    need = MARGIN * seconds
    if cfg.distributed.timeout_s < need:
        raise ConfigError(
            f"distributed.timeout_s={cfg.distributed.timeout_s:g} s is shorter than "
            f"{MARGIN:g}x the planner's estimate of a rollout and its scoring "
            f"({seconds:,.0f} s, `agentgym plan CONFIG`): ranks waiting for the slowest one "
            f"after the rollout would fail. Set distributed.timeout_s={need:,.0f} or more "
            "(the fault detector, not this timeout, finds a hung rank)."
        )
