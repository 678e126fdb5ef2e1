"""The collective timeout and the fault detector against the time model: no legitimate wait
may outlast them.

Two stretches of a run have ranks wait for each other, legitimately, for minutes:

* **the first start**: every rank reads its share of the checkpoint and its engine
  worker's weights, then the engine profiles its memory and captures its CUDA graphs;
  the first collective after it waits for the slowest rank (:func:`startup_seconds`);
* **a rollout and its scoring**: every rank generates its share and scores it; the first
  collective after it waits for the slowest rank (:func:`rollout_seconds`: prefill and
  decode, environment and reward, engine sleep and wake).

If the planner's estimate of either exceeds ``distributed.timeout_s``, the launch fails
with a collective timeout; if it exceeds the detector's ``health.stuck_after_s`` (a rank
without CPU use outside any collective while a peer waits in one that long is called
hung), the detector stops or restarts a healthy run. :func:`check_collective_timeout` and
:func:`check_detector` say so at start-up, with the value to set, for every config the
planner can size (a ``plan:`` section and ``model.architecture`` or a preset); configs it
cannot size are not checked.
"""

from __future__ import annotations

from typing import Any

from agentgym import ConfigError

#: how much longer than the estimate a timeout must be (the estimate is a model)
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


def startup_seconds(cfg: Any) -> float | None:
    """The planner's seconds from the ranks' start to their first collective after the
    rollout engine is built: a node reads what its GPUs hold of the checkpoint (the
    trainer's base share and, with a colocated engine, the engine's weights) through its
    file system at ``plan.efficiency.host_io_gbps``, then the engine's first start
    (``plan.efficiency.engine_start_s``: profiling, KV cache, CUDA graphs). None when the
    planner cannot size the config."""
    from agentgym.plan.config import plan_inputs, plan_settings
    from agentgym.plan.memory import GIB
    from agentgym.plan.plans import plan_lora

    if not (cfg.model.architecture or cfg.model.preset):
        return None
    try:
        inputs = plan_inputs(cfg)
    except ConfigError:
        return None
    plan = plan_lora(
        inputs.arch,
        lora=inputs.lora,
        parallel=inputs.parallel,
        base_dtype=inputs.base_dtype,
        train=inputs.train,
        rollout=inputs.rollout,
        hardware=inputs.hardware,
        overheads=False,
    )
    eff = plan_settings(cfg).efficiency
    per_gpu = plan.item("base weights") + plan.item("rollout weights")
    read = per_gpu * GIB * inputs.hardware.node_gpus / (eff.host_io_gbps * 1e9)
    return read + (eff.engine_start_s if plan.engine is not None else 0.0)


def check_collective_timeout(cfg: Any) -> None:
    """Refuse a sharded run whose ``distributed.timeout_s`` is shorter than
    :data:`MARGIN` times the planner's longest wait between ranks (module docstring).

    Raises:
        ConfigError: naming the estimate and the timeout to set.
    """
    if cfg.distributed.strategy == "none":
        return
    waits = _waits(cfg)
    if not waits:
        return
    what, seconds = max(waits.items(), key=lambda kv: kv[1])
    need = MARGIN * seconds
    if cfg.distributed.timeout_s < need:
        raise ConfigError(
            f"distributed.timeout_s={cfg.distributed.timeout_s:g} s is shorter than "
            f"{MARGIN:g}x the planner's estimate of {what} ({seconds:,.0f} s, `agentgym plan "
            f"CONFIG`): ranks waiting for the slowest one would fail. Set "
            f"distributed.timeout_s={need:,.0f} or more (the fault detector, not this "
            "timeout, finds a hung rank)."
        )


def check_detector(cfg: Any) -> list[str]:
    """The fault detector's ``health.stuck_after_s`` against the planner's longest wait
    between ranks: shorter, the detector would call a rank that waits on its
    environments hung while its peers wait for it. Refused when the detector acts on it
    (``distributed.on_fault`` stop or restart), a warning line with ``warn``.

    Raises:
        ConfigError: naming the wait and the value to set.
    """
    if cfg.distributed.strategy == "none" or not cfg.health.enabled:
        return []
    waits = _waits(cfg)
    if not waits:
        return []
    what, seconds = max(waits.items(), key=lambda kv: kv[1])
    need = MARGIN * seconds
    if cfg.health.stuck_after_s >= need:
        return []
    message = (
        f"health.stuck_after_s={cfg.health.stuck_after_s:g} s is shorter than {MARGIN:g}x the "
        f"planner's estimate of {what} ({seconds:,.0f} s): a rank that waits on its "
        "environments while its peers wait for it in a collective would be called hung"
    )
    if cfg.distributed.on_fault == "warn":
        return [f"{message} (distributed.on_fault=warn: reported only)."]
    restarts = cfg.distributed.max_restarts
    raise ConfigError(
        f"{message}, and distributed.on_fault={cfg.distributed.on_fault} would "
        + ("stop the run" if cfg.distributed.on_fault == "stop" or restarts == 0 else "restart it")
        + f". Set health.stuck_after_s={need:,.0f} or more."
    )


def _waits(cfg: Any) -> dict[str, float]:
    """The planner's estimates of the stretches ranks wait through, by name."""
    out = {}
    rollout = rollout_seconds(cfg)
    if rollout is not None:
        out["a rollout and its scoring"] = rollout
    start = startup_seconds(cfg)
    if start is not None:
        out["the first start (checkpoint and engine weights read, the engine's warm-up)"] = start
    return out
