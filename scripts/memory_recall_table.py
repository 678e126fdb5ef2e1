"""The MemoryRecall demo's closing table (scripts/memory_recall_demo.sh), and what it says
in words.

    python scripts/memory_recall_table.py RUN_DIR START SFT_END DAPO_END

RUN_DIR holds the demo's ``dapo/`` run (its config and metrics) and the greedy
evaluations ``greedy_before.json`` / ``greedy_after.json``; the three times (seconds since
the epoch) split the wall time into the demo's stages. A figure the run did not measure
(a smoke run trains no summary turn with a non-zero advantage) is "n/a", never "nan".
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: the demo's target: sampled recall after DAPO at least this much above the warm start
TARGET_GAIN = 0.15


def mean(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    """The mean of ``key`` over the rows with a finite number for it, or None."""
    vals = [r[key] for r in rows if isinstance(r.get(key), int | float) and math.isfinite(r[key])]
    return sum(vals) / len(vals) if vals else None


def fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def change(before: float, after: float) -> str:
    """``rose from 28.9% to 98.4% (+69.5 points)``, or ``stayed at 100.0%``."""
    points = 100 * (after - before)
    if abs(points) < 0.05:
        return f"stayed at {after:.1%}"
    verb = "rose" if points > 0 else "fell"
    return f"{verb} from {before:.1%} to {after:.1%} ({points:+.1f} points)"


def in_words(
    sampled: tuple[float, float], greedy: tuple[float, float], temp: float, gains: Mapping[str, Any]
) -> list[str]:
    """What the run learned, said in sentences from its own figures."""
    (b, a), (gb, ga) = sampled, greedy
    lines = [
        f"Held-out recall sampled at temperature {temp:g} {change(b, a)}; greedy recall "
        f"{change(gb, ga)}."
    ]
    if gb - b >= 0.1 and a - b >= TARGET_GAIN:
        lines.append(
            "What was learned: the warm start could already recall the code when it took its "
            "most likely tokens (greedy), but lost it often when sampling; DAPO made the "
            "sampled policy keep it too."
        )
    elif a - b >= TARGET_GAIN:
        lines.append("What was learned: DAPO raised sampled recall well beyond the warm start.")
    else:
        lines.append(
            f"DAPO did not raise sampled recall by the target {TARGET_GAIN * 100:.0f} points "
            "here (a few steps, or a seed that needs more: see docs/trainer.md)."
        )
    act, summary = gains.get("act"), gains.get("summary")
    if act is not None or summary is not None:
        lines.append(
            "Credit: the update moved the log-probability of each trained token the way its "
            f"episode's reward asked by {fmt(act, '+.4f')} nats per token in act turns and "
            f"{fmt(summary, '+.4f')} in summary turns (positive: toward the reward; n/a: no "
            "such token had a non-zero advantage)."
        )
    return lines


def table(run: Path, start: int, sft_end: int, dapo_end: int, now: float) -> str:
    """The table and its sentences for the demo run in ``run``."""
    from agentgym import load_config
    from agentgym.trainers import TrainConfig

    cfg = load_config(TrainConfig, run / "dapo" / "config.yaml")
    lines = (run / "dapo" / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines if x.strip()]
    evals = [r for r in rows if "eval/reward" in r]
    before, after = evals[0], evals[-1]
    steps = [r for r in rows if "charts/env_reward" in r]
    generated = sum(r["charts/groups_generated"] for r in steps)
    filtered = sum(r["charts/groups_filtered"] for r in steps) / max(1, generated)
    greedy = [
        json.loads((run / f"greedy_{w}.json").read_text())["mean_reward"]
        for w in ("before", "after")
    ]
    n, temp = int(before["eval/episodes"]), cfg.eval.temperature
    b, a = before["eval/reward"], after["eval/reward"]
    first, last = steps[:5], steps[-5:]
    gains = {k: mean(steps, f"kinds/{k}_logprob_gain") for k in ("act", "summary")}
    out = [
        "",
        f"Held-out tasks ({n})                      warm start (SFT)   "
        f"after DAPO ({after['step']} steps)   after-before",
        f"recall, sampled at temperature {temp:g}      {b:>16.1%}   {a:>22.1%}   {a - b:>+12.3f}",
        f"recall, greedy (the copy skill alone)   {greedy[0]:>16.1%}   {greedy[1]:>22.1%}   "
        f"{greedy[1] - greedy[0]:>+12.3f}",
        f"episode: {before['eval/conversations_mean']:.1f} conversations; summary tokens per "
        f"episode {before['eval/summary_tokens_mean']:.1f} -> "
        f"{after['eval/summary_tokens_mean']:.1f}; working context (largest prompt) "
        f"{before['eval/working_context_mean']:.0f} -> {after['eval/working_context_mean']:.0f} "
        "tokens",
        f"training reward at temperature {cfg.rollout.temperature:g}: "
        f"{fmt(mean(first, 'charts/env_reward'), '.3f')} (first 5 steps) -> "
        f"{fmt(mean(last, 'charts/env_reward'), '.3f')} (last 5); groups filtered (all "
        f"rewards equal): {filtered:.0%}; overlong episodes: "
        f"{fmt(mean(steps, 'charts/overlong_share'), '.0%')}",
        f"credit by turn kind, per step: trained tokens act "
        f"{fmt(mean(steps, 'kinds/act_tokens'), '.0f')}, summary "
        f"{fmt(mean(steps, 'kinds/summary_tokens'), '.0f')}; log-prob gain per token (nats, "
        f"toward the advantage) act {fmt(gains['act'], '+.4f')}, summary "
        f"{fmt(gains['summary'], '+.4f')}",
        f"target (after >= before + {TARGET_GAIN:.2f}, sampled): "
        f"{'reached' if a - b >= TARGET_GAIN else 'NOT reached'}",
        "",
        *in_words((b, a), (greedy[0], greedy[1]), temp, gains),
        "",
        f"wall time: stage 1 {sft_end - start:.0f} s, stage 2 {dapo_end - sft_end:.0f} s (with its "
        f"evaluations), greedy evaluations {now - dapo_end:.0f} s, total {now - start:.0f} s; "
        f"plots in {run / 'dapo' / 'plots'}",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    run_dir, *times = sys.argv[1:5]
    start, sft_end, dapo_end = map(int, times)
    print(table(Path(run_dir), start, sft_end, dapo_end, time.time()))
