"""A rank's dry run beside the planner: ``agentgym train CONFIG --dry-run --rank R``.

:func:`dry_run_report` runs the trainer's dry run of each rank asked for
(:func:`agentgym.trainers.dry_run_rank`: the rank's real set-up and first training call at
the model's real shapes, on fake tensors) and prints what it measured beside the planner's
line for the same quantity on the same pipeline stage (:func:`~.plans.plan_lora` with
``stage=``, tensor bytes without the per-GPU constants, for the dry run's own micro-batches),
then whether the rank fits its GPU: the training call's peak plus the planner's per-GPU
constants (CUDA context, NCCL, fragmentation), the rollout phase (the rank's state as
measured plus the planner's engine lines, which the dry run does not run), and the
config's own call, whose micro-batches (a data-parallel rank's share of an update) the
dry run does not run: its peak plus the planner's receive buffers for the rest. The exit
status is non-zero when a rank's set-up or step fails, or a phase exceeds the GPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym.plan.memory import GIB, overhead_items

#: host memory a rank may hold at set-up, in units of its own adapter and optimizer share
HOST_BOUND = 1.25


@dataclass
class RankCheck:
    """One rank's dry run against the planner.

    Attributes:
        rank: the rank; lines: the report; ok: it set up, stepped and fits.
        figures: the measured :class:`~agentgym.trainers.dry_run.RankFigures` (None when
            the set-up failed); error: what failed.
    """

    rank: int
    lines: list[str] = field(default_factory=list)
    ok: bool = True
    figures: Any = None
    error: str | None = None


def dry_run_report(
    cfg: Any, ranks: Sequence[int], *, say: Callable[[str], None] = print
) -> list[RankCheck]:
    """Dry-run each of ``ranks`` of ``cfg`` (a :class:`~agentgym.plan.PlanConfig`) and
    print its figures beside the planner's; returns the checks (``ok`` per rank)."""
    from agentgym.plan.config import plan_inputs, plan_settings
    from agentgym.trainers import dry_run_rank

    inputs = plan_inputs(cfg)
    settings = plan_settings(cfg)
    out = []
    for rank in ranks:
        check = RankCheck(rank)
        t0 = time.monotonic()
        try:
            figures = dry_run_rank(
                cfg,
                rank,
                seq_len=inputs.train.seq_len,
                prompt_tokens=settings.workload.prompt_tokens,
                gpus_per_node=settings.gpus_per_node,
                say=lambda _s: None,
            )
        except Exception as e:  # the launch would meet it: report it, rank by rank
            check.ok = False
            check.error = f"{type(e).__name__}: {e}"
            check.lines = [f"rank {rank}: the set-up or first step FAILS: {check.error}"]
        else:
            check.figures = figures
            check.lines, check.ok = compare(figures, inputs, time.monotonic() - t0)
        for line in check.lines:
            say(line)
        out.append(check)
    return out


def _stage_plan(inputs: Any, stage: int, micro_batches: int = 0) -> Any:
    """The plan of pipeline ``stage`` for a call of ``micro_batches`` micro-batches per
    data-parallel rank (0: the config's own)."""
    from dataclasses import replace

    from agentgym.plan.plans import plan_lora

    train = inputs.train
    if micro_batches:
        sequences = micro_batches * train.micro_batch_size * inputs.parallel.dp
        train = replace(train, update_sequences=sequences)
    return plan_lora(
        inputs.arch,
        lora=inputs.lora,
        parallel=inputs.parallel,
        base_dtype=inputs.base_dtype,
        train=train,
        rollout=inputs.rollout,
        hardware=inputs.hardware,
        overheads=False,
        stage=stage,
    )


def compare(figures: Any, inputs: Any, wall_s: float) -> tuple[list[str], bool]:
    """The report of one rank's figures against its stage's plan, and whether it fits."""
    c = figures.coords
    plan = _stage_plan(inputs, c["pp"], figures.micro_batches)
    gpu = inputs.hardware.gpu_mem_gib
    lines = [
        f"rank {figures.rank} of {figures.world_size}: stage {c['pp']} (layers "
        f"{figures.layers.start}-{figures.layers.stop - 1}), dp_shard {c['dp_shard']}, "
        f"ep {c['ep']}, tp {c['tp']}"
        + (
            f", experts {figures.experts.start}-{figures.experts.stop - 1}"
            if len(figures.experts)
            else ""
        )
        + f"; {wall_s:.0f} s (set-up {figures.setup_s:.0f} s, step {figures.step_s:.0f} s)",
        *(f"  {note}" for note in figures.notes),
        f"  {'per GPU (GiB)':<34}{'measured':>10}{'planner':>10}{'diff':>8}",
    ]
    in_flight = figures.micro_batches
    kept = figures.saved * min(in_flight, inputs.parallel.pp - c["pp"])
    rows = [
        ("base weights", figures.base, plan.item("base weights")),
        ("LoRA params", figures.adapter, plan.item("LoRA params")),
        ("LoRA grads", figures.grads, plan.item("LoRA grads")),
        ("optimizer states", figures.optimizer, plan.item("optimizer states")),
        ("activations: layer inputs", kept, plan.item("activations: layer inputs")),
        ("training step peak (tensors)", figures.step_peak, plan.train_gib),
    ]
    for name, got, want in rows:
        lines.append(_row(name, got / GIB, want))
    state = figures.base + figures.adapter + figures.optimizer
    train = figures.step_peak / GIB
    engine = sum(i.gib for i in plan.items if i.name.startswith("rollout"))
    rollout = state / GIB + engine
    train_total = train + sum(i.gib for i in overhead_items(train))
    rollout_total = rollout + sum(i.gib for i in overhead_items(rollout))
    fits = max(train_total, rollout_total) <= gpu
    lines += [
        f"  train phase with CUDA context, NCCL and fragmentation: {train_total:.1f} GiB; "
        f"rollout phase (the rank's state as measured + the planned engine, "
        f"{engine:.1f} GiB): {rollout_total:.1f} GiB; GPU {gpu:g} GiB: "
        + ("fits" if fits else "DOES NOT FIT"),
    ]
    calls = inputs.train.micro_batches(inputs.parallel.pp, inputs.parallel.dp)
    if calls > figures.micro_batches:  # the launch's call: more receive buffers
        more = _stage_plan(inputs, c["pp"]).item("pipeline: receive buffers")
        more -= plan.item("pipeline: receive buffers")
        train_call = train + more
        call_total = train_call + sum(i.gib for i in overhead_items(train_call))
        call_fits = call_total <= gpu
        fits = fits and call_fits
        lines.append(
            f"  the config's call ({calls} micro-batches per data-parallel rank, the dry "
            f"run's {figures.micro_batches}): {more:+.1f} GiB of pipeline receive buffers "
            f"(planned), train phase {call_total:.1f} GiB: "
            + ("fits" if call_fits else "DOES NOT FIT")
        )
    lines += [
        f"  loading plan: reads {figures.bytes_read / 1e9:.2f} GB of the checkpoint "
        f"({figures.bytes_read / max(figures.base, 1):.2f}x its base share)",
    ]
    share = figures.adapter + figures.optimizer
    host_ok = figures.host_peak <= HOST_BOUND * share
    lines.append(
        f"  host at set-up: {figures.host_peak / GIB:.2f} GiB at most (before the share is "
        f"allocated: {figures.host_before_alloc / GIB:.3f} GiB); its adapter and optimizer "
        f"share {share / GIB:.2f} GiB: "
        + (f"within {HOST_BOUND:g}x" if host_ok else f"ABOVE {HOST_BOUND:g}x")
    )
    if figures.draw_numbers:
        lines.append(
            f"  adapter draw: {figures.draw_numbers:.3g} generator numbers pass on this rank "
            "(its share's values; one process draws the same)"
        )
    if figures.engine:
        e = figures.engine
        lines.append(
            f"  engine worker: replica {e['replica']}, stage {e['stage']}, tp {e['tp']}, "
            f"layers {e['layers'][0]}-{e['layers'][1] - 1}"
            + (f", experts {e['experts'][0]}-{e['experts'][1] - 1}" if e["experts"][1] else "")
            + f"; adapter slice per sync {e['adapter_fp32'] / 1e9:.3f} GB fp32 "
            f"({e['adapter_bf16'] / 1e9:.3f} GB bf16 in the engine), "
            f"{e['from_other_stages_fp32'] / 1e9:.3f} GB of it from other stages"
        )
    if plan.engine is not None:
        lines += [f"  planner: {line}" for line in plan.engine.lines()]
    return lines, fits


def _row(name: str, got: float, want: float) -> str:
    diff = f"{(got - want) / want:+.0%}" if want else "-"
    return f"  {name:<34}{_gib(got):>10}{_gib(want):>10}{diff:>8}"


def _gib(x: float) -> str:
    return f"{x:.3f}" if x < 1 else f"{x:.2f}"


def exit_status(checks: Sequence[RankCheck]) -> int:
    """0 when every rank set up, stepped and fits its GPU, else 1."""
    return 0 if checks and all(c.ok for c in checks) else 1
