"""Why the search's winner wins: the phases it shortens and the layout changes behind them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentgym.plan.search import Layout, Scored, SearchResult


def layout_changes(old: Layout, new: Layout) -> list[str]:
    """The settings that differ between two layouts, as ``name a -> b``."""
    out = []
    pairs = [
        ("base", old.base_dtype, new.base_dtype),
        ("train tp", old.parallel.tp, new.parallel.tp),
        ("train ep", old.parallel.ep, new.parallel.ep),
        ("train pp", old.parallel.pp, new.parallel.pp),
        ("train dp", old.parallel.dp, new.parallel.dp),
        ("ZeRO", old.parallel.zero_stage, new.parallel.zero_stage),
        ("micro-batch", old.micro_batch_size, new.micro_batch_size),
        ("checkpointing", old.activation_checkpointing, new.activation_checkpointing),
        ("rollout tp", old.rollout.tp, new.rollout.tp),
        ("rollout pp", old.rollout.pp, new.rollout.pp),
        ("rollout dp", old.rollout.dp, new.rollout.dp),
        ("rollout ep", old.rollout.ep, new.rollout.ep),
        ("max_num_seqs", old.rollout.max_num_seqs, new.rollout.max_num_seqs),
        ("sleep level", old.rollout.sleep_level, new.rollout.sleep_level),
    ]
    if old.lora is not None and new.lora is not None and old.lora.r != new.lora.r:
        pairs.append(("LoRA r", old.lora.r, new.lora.r))
    for name, a, b in pairs:
        if a != b:
            out.append(f"{name} {_v(a)} -> {_v(b)}")
    return out


def _v(x: object) -> str:
    if isinstance(x, bool):
        return "on" if x else "off"
    return str(x)


def phase_deltas(old: Scored, new: Scored) -> list[tuple[str, float]]:
    """Seconds each phase changes from ``old`` to ``new``, largest saving first."""
    names = list(dict.fromkeys([*old.step.phases, *new.step.phases]))
    deltas = [(n, new.step.phases.get(n, 0.0) - old.step.phases.get(n, 0.0)) for n in names]
    return sorted(deltas, key=lambda kv: kv[1])


def _phase_reason(phase: str, old: Scored, new: Scored) -> str:
    """A physical reason for a phase's change, from the two modelled steps."""
    o, n = old.step, new.step
    if phase.startswith("rollout: decode"):
        ro, rn = old.layout.rollout, new.layout.rollout
        why = []
        if rn.pp < ro.pp:
            why.append(
                f"each token crosses {rn.pp} engine pipeline stage(s) instead of {ro.pp}, "
                "and a decode step pays each stage's kernels in turn"
            )
        if rn.dp > ro.dp:
            why.append(f"{rn.dp} engine replicas share the episodes instead of {ro.dp}")
        if rn.tp != ro.tp:
            why.append(f"engine TP {ro.tp} -> {rn.tp} changes the weight bytes and all-reduces")
        tail_o = o.idle.get("rollout tail (few sequences left)", 0.0)
        tail_n = n.idle.get("rollout tail (few sequences left)", 0.0)
        return (
            "; ".join(why or ["the engine reads fewer bytes per decoded token"])
            + f". The tail with few sequences left costs {tail_n:,.0f} s against "
            f"{tail_o:,.0f} s; at full concurrency decode runs at "
            f"{n.decode_tokens_per_s_per_gpu:,.0f} tokens/s per GPU against "
            f"{o.decode_tokens_per_s_per_gpu:,.0f}"
        )
    if phase.startswith("train: pipeline bubble"):
        return "fewer pipeline stages or more micro-batches shrink the 1F1B bubble"
    if phase.startswith("train: forward+backward"):
        return "more of the GPU's peak is used per micro-batch (bigger matrix products, no recomputation)"
    if phase.startswith("train: TP/EP/PP"):
        return "smaller or node-local TP/EP groups move fewer bytes over slower links"
    if phase.startswith("engine sleep/wake"):
        return "the engine keeps or drops its weights instead of moving them over PCIe"
    return "see the phase table"


def explain(result: SearchResult) -> tuple[str, ...]:
    """Sentences on why the winner wins (against the config's layout and the runner-up)."""
    if not result.ranked:
        return ()
    win = result.ranked[0]
    out = [
        f"The fastest layout takes {win.seconds:,.0f} s per step at {win.peak_gib:.1f} of "
        f"{result.gpu_mem_gib:g} GiB ({win.headroom_gib:.1f} GiB headroom); its critical "
        f"resource is {win.step.critical_resource} and {win.step.idle_share:.0%} of the step "
        "the GPUs wait."
    ]
    base = result.baseline
    if base is not None and base.layout != win.layout:
        saved = base.seconds - win.seconds
        top = [d for d in phase_deltas(base, win) if d[1] < 0][:2]
        changes = layout_changes(base.layout, win.layout)
        if saved > 0 and top:
            parts = ", ".join(f"{name} {delta:+,.0f} s" for name, delta in top)
            out.append(
                f"Against the config's own layout ({base.seconds:,.0f} s, peak "
                f"{base.peak_gib:.1f} GiB) it saves {saved:,.0f} s per step "
                f"({saved / base.seconds:.0%}): {parts}. Changed: {', '.join(changes)}."
            )
            out.append(f"Why {top[0][0]} shrinks: {_phase_reason(top[0][0], base, win)}.")
    elif base is not None:
        out.append("The config's own layout is already the fastest in the space.")
    if len(result.ranked) > 1:
        second = result.ranked[1]
        worse = [d for d in phase_deltas(win, second) if d[1] > 0]
        if worse:
            name, delta = worse[-1]
            out.append(
                f"The runner-up ({', '.join(layout_changes(win.layout, second.layout)) or 'same'}) "
                f"is {second.seconds - win.seconds:,.1f} s slower, mostly in {name} "
                f"({delta:+,.1f} s)."
            )
    return tuple(out)
