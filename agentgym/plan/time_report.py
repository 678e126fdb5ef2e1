"""Text and JSON for the time model's answers: one step by phase, a search's ranking."""

from __future__ import annotations

from typing import Any

from agentgym.plan.disagg import DisaggResult
from agentgym.plan.search import Scored, SearchResult
from agentgym.plan.timing import StepTime


def format_step(step: StepTime, title: str = "Step time (time model)") -> str:
    """Seconds by phase and the step's summary numbers."""
    total = step.seconds
    lines = [title, f"{'phase':<34}{'seconds':>10}{'share':>8}"]
    for name, sec in step.phases.items():
        lines.append(f"{name:<34}{sec:>10,.1f}{sec / total:>8.1%}")
    lines += [
        "-" * 52,
        f"{'step':<34}{total:>10,.1f}   ({total / 60:,.1f} min)",
        "",
        f"tokens/s per GPU: {step.tokens_per_s_per_gpu:,.1f} (prompt + response tokens of the "
        "step's sequences over step time and GPUs)",
        f"MFU: {step.mfu:.1%} of the bf16 peak over the whole step; training phase "
        f"{step.train_mfu:.1%}",
        f"decode: {step.decode_memory_bound:.0%} HBM-bandwidth-bound; "
        f"{step.decode_tokens_per_s_per_gpu:,.0f} tokens/s per GPU at full concurrency",
        f"idle (all-sync): {step.idle_share:.0%} of the step ("
        + ", ".join(f"{k} {v:,.0f} s" for k, v in step.idle.items())
        + ")",
        f"critical resource: {step.critical_resource} ("
        + ", ".join(f"{k} {v:,.0f} s" for k, v in list(step.resources.items())[:4])
        + ")",
    ]
    return "\n".join(lines)


#: Pareto layouts printed at most (the JSON has them all)
PARETO_ROWS = 12


def _spread(items: tuple[Scored, ...], n: int) -> list[Scored]:
    """``n`` items evenly spread over ``items``, first and last included."""
    idx = sorted({round(i * (len(items) - 1) / (n - 1)) for i in range(n)})
    return [items[i] for i in idx]


def _row(i: int, s: Scored) -> str:
    return f"{i:>3} {s.seconds:>9,.1f} {s.peak_gib:>8.1f} {s.headroom_gib:>8.1f}  {s.layout.describe()}"


def format_search(result: SearchResult, disagg: DisaggResult | None = None) -> str:
    """The ranking, the winner by phase, the Pareto front and the explanation."""
    lines = [
        f"search ({result.mode}): {result.space:,} layouts of {result.gpus} GPUs, "
        f"{result.fitting:,} fit {result.gpu_mem_gib:g} GiB; {result.seconds:.2f} s",
    ]
    lines += [f"held: {h}" for h in result.held]
    lines += ["", f"top {len(result.ranked)} by modelled step time:"]
    lines.append(f"{'#':>3} {'step s':>9} {'peak GiB':>8} {'headroom':>8}  layout")
    lines += [_row(i + 1, s) for i, s in enumerate(result.ranked)]
    if result.baseline is not None:
        b = result.baseline
        lines.append(
            f"{'cfg':>3} {b.seconds:>9,.1f} {b.peak_gib:>8.1f} {b.headroom_gib:>8.1f}  {b.layout.describe()}"
        )
    lines += ["", format_step(result.ranked[0].step, "winner by phase:")]
    front = result.pareto
    shown = front if len(front) <= PARETO_ROWS else _spread(front, PARETO_ROWS)
    lines += [
        "",
        f"Pareto front: {len(front)} layouts trade memory headroom for step time (nothing "
        f"beats them on both){'; ' + str(len(shown)) + ' of them, evenly spread' if len(shown) < len(front) else ''}:",
    ]
    lines.append(f"{'#':>3} {'step s':>9} {'peak GiB':>8} {'headroom':>8}  layout")
    lines += [_row(front.index(s) + 1, s) for s in shown]
    lines += ["", "why:"] + [f"  {e}" for e in result.explanation]
    if disagg is not None:
        win = result.ranked[0].step
        lines += [
            "",
            "rollout serving (decode phase of this workload):",
            f"  colocated (the winner's engine): {win.phases.get('rollout: decode', 0):,.0f} s, "
            f"{win.decode_tokens_per_s_per_gpu:,.0f} tokens/s per GPU at full concurrency",
            f"  disaggregated, MegaScale-Infer style ({disagg.layout.describe()}): "
            f"{disagg.decode.seconds:,.0f} s, {disagg.tokens_per_s_per_gpu:,.0f} tokens/s per GPU; "
            f"{disagg.attention_gib:.1f} GiB per attention GPU, {disagg.expert_gib:.1f} per expert GPU",
            "  (modelled only: agentgym's engines do not implement disaggregated serving)",
        ]
    return "\n".join(lines)


def _scored(s: Scored) -> dict[str, Any]:
    return {
        "layout": s.layout.describe(),
        "peak_gib": s.peak_gib,
        "headroom_gib": s.headroom_gib,
        "step": s.step.to_dict(),
    }


def search_to_dict(result: SearchResult, disagg: DisaggResult | None = None) -> dict[str, Any]:
    """The search as JSON-ready data (``agentgym plan --search --json``)."""
    out: dict[str, Any] = {
        "mode": result.mode,
        "gpus": result.gpus,
        "space": result.space,
        "fitting": result.fitting,
        "seconds": result.seconds,
        "held": list(result.held),
        "ranked": [_scored(s) for s in result.ranked],
        "pareto": [_scored(s) for s in result.pareto],
        "baseline": _scored(result.baseline) if result.baseline else None,
        "explanation": list(result.explanation),
    }
    if disagg is not None:
        out["disaggregated"] = {
            "layout": disagg.layout.describe(),
            "decode_s": disagg.decode.seconds,
            "tokens_per_s_per_gpu": disagg.tokens_per_s_per_gpu,
        }
    return out
