"""The end of an SFT run, as the trainer's: PNG plots in ``plots/`` (handed to the run's
trackers), a short summary of the steps, and the first vs last held-out evaluation
(``eval_table.md``), all read from ``metrics.jsonl`` so that a resumed run reports the
whole run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym.trainers.evaluation import eval_table
from agentgym.trainers.logging import finite_mean, read_jsonl
from agentgym.trainers.tracking import close_tracking, trackers_for

#: the panels of ``plots/training.png``: a title and the metric drawn in it
TRAINING_PANELS = (
    ("cross-entropy on the reply tokens", "losses/sft"),
    ("gradient norm (before clipping)", "losses/grad_norm"),
    ("learning rate", "charts/lr"),
)
#: the panels of ``plots/eval.png`` (held-out evaluations, when the run evaluated)
EVAL_PANELS = (
    ("held-out accuracy", "eval/accuracy"),
    ("held-out mean reward", "eval/reward"),
    ("held-out mean response tokens", "eval/response_tokens_mean"),
)


def step_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows of training steps (an evaluation's own row has no loss)."""
    return [r for r in rows if "losses/sft" in r]


def _panels(
    path: Path, rows: Sequence[Mapping[str, Any]], panels: Sequence[tuple[str, str]], style: str
) -> Path | None:
    """One figure of ``panels`` (those with a value), a titled panel per metric against
    the step, integer step ticks; ``None`` when no panel has a value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    drawn = []
    for title, key in panels:
        pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), int | float)]
        if pts:
            drawn.append((title, pts))
    if not drawn:
        return None
    fig, axes = plt.subplots(1, len(drawn), figsize=(4 * len(drawn), 3), squeeze=False)
    for ax, (title, pts) in zip(axes.flat, drawn, strict=True):
        ax.plot([s for s, _ in pts], [v for _, v in pts], style)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_sft(run_dir: str | Path) -> list[Path]:
    """Write ``plots/training.png`` (loss, gradient norm, learning rate per step) and,
    when the run evaluated, ``plots/eval.png`` (held-out accuracy, reward and reply
    length at each evaluation); the run's trackers get them and are closed."""
    run_dir = Path(run_dir)
    rows = read_jsonl(run_dir / "metrics.jsonl")
    out = run_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    written = [
        p
        for p in (
            _panels(out / "training.png", step_rows(rows), TRAINING_PANELS, "-"),
            _panels(out / "eval.png", [r for r in rows if "eval/reward" in r], EVAL_PANELS, "o"),
        )
        if p is not None
    ]
    trackers = trackers_for(run_dir)
    if trackers is not None:
        trackers.log_images(written)
    close_tracking(run_dir)
    return written


def sft_summary(rows: Sequence[Mapping[str, Any]], out: str | Path) -> str:
    """A few lines on a finished SFT run, in the trainer's form: the steps, the time per
    step, the loss of the first vs the last steps, and where to look next."""
    steps = step_rows(rows)
    if not steps:
        return f"no training steps recorded in {out}/metrics.jsonl"

    k = max(1, min(3, len(steps) // 2))
    head, tail = steps[:k], steps[-k:]
    lines = [
        f"trained steps {steps[0]['step']}-{steps[-1]['step']} "
        f"({finite_mean(steps, 'time/step_s') or 0:.2f} s/step); first {k} vs last {k} steps:"
    ]
    a, b = finite_mean(head, "losses/sft"), finite_mean(tail, "losses/sft")
    if a is not None and b is not None:
        lines.append(f"  {'loss':<13} {a:8.3f} -> {b:8.3f}")
    lines.append(f"  see {out}/metrics.jsonl, {out}/plots/; the model: {out}/model")
    return "\n".join(lines)


def write_sft_summary(out: str | Path) -> dict[str, Any]:
    """Print :func:`sft_summary` and, when the run evaluated, its first vs last held-out
    evaluation (also written to ``eval_table.md``); returns those two evaluations as
    ``before`` / ``after`` (none when the run did not evaluate)."""
    out = Path(out)
    rows = read_jsonl(out / "metrics.jsonl")
    print(sft_summary(rows, out))
    evals = [r for r in rows if "eval/reward" in r]
    if not evals:
        return {}
    text = eval_table(evals[0], evals[-1])
    (out / "eval_table.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    return {"before": evals[0], "after": evals[-1]}
