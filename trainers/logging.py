"""Metrics to JSONL, a few sample episodes per step, and PNG plots at the end of a run.

The rows also reach the run's trackers (TensorBoard, W&B: ``run.report_to``) when
:func:`~agentgym.trainers.tracking.start_tracking` attached them to the writers; the
plots reach them from :func:`plot_run`, which then closes them.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym.trainers.tracking import close_tracking, start_tracking, trackers_for

__all__ = [
    "JsonlWriter",
    "SampleLog",
    "plot_run",
    "plot_timeline",
    "progress_stats",
    "read_jsonl",
    "start_tracking",
    "train_summary",
    "write_summary",
]


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):
        return _clean(v.item())
    return v


def _replace_lines(path: Path, lines: Sequence[str]) -> None:
    """Rewrite ``path`` as ``lines`` without ever leaving it half written: a new file
    beside it, flushed to disk, renamed over it (a kill at any moment leaves the old
    file or the new one)."""
    tmp = path.with_name(f".{path.name}.rewrite")
    with tmp.open("w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class JsonlWriter:
    """Append one JSON object per line (flushed, so a killed run keeps what it wrote).

    ``enabled=False`` makes every call a no-op (ranks other than 0 of a sharded run).
    Trackers attached with :meth:`attach` get every row too (the file's stem, e.g.
    ``metrics`` or ``timeline``, says what the row is).
    """

    def __init__(
        self, path: str | Path, *, truncate_after_step: int | None = None, enabled: bool = True
    ) -> None:
        self.path = Path(path)
        self.enabled = enabled
        self.trackers: Any = None
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if truncate_after_step is not None and self.path.exists():
            # on resume: drop rows of steps after the checkpoint (they will be redone)
            keep = [
                r for r in read_jsonl(self.path) if int(r.get("step", 0)) <= truncate_after_step
            ]
            _replace_lines(self.path, [json.dumps(r) for r in keep])

    def attach(self, trackers: Any) -> None:
        """Also hand every row to ``trackers`` (:class:`~agentgym.trainers.tracking.Trackers`)."""
        self.trackers = trackers

    def write(self, row: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({k: _clean(v) for k, v in row.items()}) + "\n")
        if self.trackers is not None:
            self.trackers.on_row(self.path.stem, row)


class SampleLog(JsonlWriter):
    """``samples.jsonl``: what the model wrote. Each step, ``per_step`` of its episodes,
    spread over the step's range of rewards (the worst, the best and between), one row
    each: the step, env, seed, reward (and the shaped reward the update used), the
    reward breakdown, and every turn's prompt (the last message the policy saw) and reply.
    """

    def __init__(self, path: str | Path, per_step: int, **kw: Any) -> None:
        super().__init__(path, **kw)
        self.per_step = per_step
        self.enabled = self.enabled and per_step > 0

    def write_step(
        self, step: int, episodes: Sequence[Any], trained: Sequence[Any], shaped: Sequence[float]
    ) -> None:
        """Write the step's samples; ``shaped`` are the rewards of the ``trained`` episodes."""
        if not self.enabled or not episodes:
            return
        by_id = {id(ep): r for ep, r in zip(trained, shaped, strict=True)}
        ranked = sorted(episodes, key=lambda ep: (ep.reward, ep.seed or 0, ep.sample))
        n = min(self.per_step, len(ranked))
        picks = sorted({round(i * (len(ranked) - 1) / max(1, n - 1)) for i in range(n)})
        for i in picks:
            ep = ranked[i]
            self.write(
                {
                    "step": step,
                    "env_id": ep.env_id,
                    "task_id": ep.task_id,
                    "seed": ep.seed,
                    "sample": ep.sample,
                    "reward": ep.reward,
                    "shaped_reward": by_id.get(id(ep)),  # None: its group was not trained
                    "reward_breakdown": ep.reward_breakdown,
                    "turns": [
                        {
                            "conversation": t.conversation,
                            "kind": t.kind,
                            "prompt": t.messages[-1].content if t.messages else "",
                            "reply": t.completion.text,
                            "tokens": t.completion.num_tokens,
                            "finish_reason": t.completion.finish_reason,
                        }
                        for t in ep.turns
                    ],
                }
            )


def train_summary(rows: Sequence[Mapping[str, Any]], out: str | Path) -> str:
    """A few lines on a finished run from its step rows: steps, time, the first and last
    steps' reward, accuracy and reply length, and where to look next."""
    steps = [r for r in rows if "charts/reward" in r]
    if not steps:
        return f"no training steps recorded in {out}/metrics.jsonl"

    def avg(part: Sequence[Mapping[str, Any]], key: str) -> float | None:
        vals = [r[key] for r in part if isinstance(r.get(key), int | float)]
        vals = [v for v in vals if math.isfinite(v)]
        return sum(vals) / len(vals) if vals else None

    k = max(1, min(3, len(steps) // 2))
    head, tail = steps[:k], steps[-k:]
    skipped = [r["step"] for r in steps if r.get("charts/update_skipped")]
    span = f"steps {steps[0]['step']}-{steps[-1]['step']}"
    if len(skipped) == len(steps):
        did = f"ran {span} without a single update (each was skipped: charts/update_skipped)"
    elif skipped:
        did = f"ran {span}, {len(steps) - len(skipped)} with an update ({len(skipped)} skipped)"
    else:
        did = f"trained {span}"
    lines = [f"{did} ({avg(steps, 'time/step_s') or 0:.1f} s/step); first {k} vs last {k} steps:"]
    for key, name in (
        ("charts/reward", "reward"),
        ("charts/accuracy", "accuracy"),
        ("charts/response_tokens_mean", "reply tokens"),
    ):
        a, b = avg(head, key), avg(tail, key)
        if a is not None and b is not None:
            lines.append(f"  {name:<13} {a:8.3f} -> {b:8.3f}")
    lines.append(
        f"  see {out}/metrics.jsonl, {out}/samples.jsonl (what the model wrote), {out}/plots/"
    )
    return "\n".join(lines)


#: the step metrics shown beside the progress bar (or in its log lines), short names
PROGRESS_KEYS = (
    ("charts/reward", "reward"),
    ("charts/accuracy", "acc"),
    ("charts/response_tokens_mean", "tok"),
    ("losses/total", "loss"),
    ("losses/approx_kl_ref", "kl"),
    ("charts/lr", "lr"),
    ("charts/idle_share", "idle"),
    ("time/step_s", "s/step"),
)


def progress_stats(metrics: dict[str, Any]) -> dict[str, Any]:
    """The :data:`PROGRESS_KEYS` present in a step's metrics, under their short names."""
    return {
        short: metrics[k]
        for k, short in PROGRESS_KEYS
        if metrics.get(k) is not None
        and not (isinstance(metrics[k], float) and not math.isfinite(metrics[k]))
    }


def write_summary(out: str | Path) -> None:
    """At the end of a run: print :func:`train_summary`, and the first vs last held-out
    evaluation (also written to ``eval_table.md``) when the run evaluated."""
    from agentgym.trainers.evaluation import eval_table

    out = Path(out)
    rows = read_jsonl(out / "metrics.jsonl")
    print(train_summary(rows, out))
    evals = [r for r in rows if "eval/reward" in r]
    if evals:
        text = eval_table(evals[0], evals[-1])
        (out / "eval_table.md").write_text(text + "\n", encoding="utf-8")
        print(text)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a torn last line (killed writer) is skipped."""
    rows = []
    p = Path(path)
    if not p.exists():
        return rows
    for line in p.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


#: training.png's panels: a title and the metrics drawn in it (those a run logged)
TRAINING_PANELS = (
    ("losses", ("losses/total", "losses/policy", "losses/value", "losses/nll_positive")),
    ("entropy", ("losses/entropy",)),
    ("KL", ("losses/kl", "losses/approx_kl_ref")),
    ("grad norm", ("losses/grad_norm",)),
    ("learning rate", ("charts/lr",)),
    ("critic explained variance", ("critic/explained_variance",)),
)


def _has(rows: Sequence[Mapping[str, Any]], key: str) -> bool:
    return any(isinstance(r.get(key), int | float) for r in rows)


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write reward.png, response_length.png, training.png (losses, entropy, KL, grad
    norm, learning rate) and timeline.png into ``run_dir/plots``;
    the run's trackers get them and are closed (the run has ended)."""
    written = _plot_run(run_dir)
    trackers = trackers_for(run_dir)
    if trackers is not None:
        trackers.log_images(written)
        close_tracking(run_dir)
    return written


def _plot_run(run_dir: str | Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "charts/reward" in r]
    out_dir = run_dir / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    if rows:
        steps = [r["step"] for r in rows]

        def series(key: str) -> list[float]:
            return [r.get(key) if r.get(key) is not None else float("nan") for r in rows]

        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(steps, series("charts/reward"), label="train reward (shaped)")
        if any(r.get("charts/accuracy") is not None for r in rows):
            ax.plot(steps, series("charts/accuracy"), label="train accuracy")
        evals = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "eval/reward" in r]
        if evals:
            ax.plot(
                [r["step"] for r in evals],
                [r["eval/reward"] for r in evals],
                "o-",
                label="held-out reward",
            )
        ax.set_xlabel("step")
        ax.set_ylabel("reward")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        written.append(_save(fig, out_dir / "reward.png"))

        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(steps, series("charts/response_tokens_mean"), label="mean")
        ax.plot(steps, series("charts/response_tokens_max"), label="max")
        ax.set_xlabel("step")
        ax.set_ylabel("response tokens")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        written.append(_save(fig, out_dir / "response_length.png"))
        panels = [
            (title, keys) for title, keys in TRAINING_PANELS if any(_has(rows, k) for k in keys)
        ]
        if panels:
            cols = min(3, len(panels))
            fig, axes = plt.subplots(
                -(-len(panels) // cols),
                cols,
                figsize=(4 * cols, 3 * -(-len(panels) // cols)),
                squeeze=False,
            )
            for ax, (title, keys) in zip(axes.flat, panels, strict=False):
                for k in keys:
                    if _has(rows, k):
                        ax.plot(steps, series(k), label=k.split("/")[-1])
                ax.set_title(title, fontsize=10)
                ax.set_xlabel("step")
                ax.grid(alpha=0.3)
                if len(keys) > 1:
                    ax.legend(fontsize=8)
            for ax in list(axes.flat)[len(panels) :]:
                ax.set_visible(False)
            fig.tight_layout()
            written.append(_save(fig, out_dir / "training.png"))

    spans = read_jsonl(run_dir / "timeline.jsonl")
    if spans:
        written.append(plot_timeline(spans, out_dir / "timeline.png"))
    plt.close("all")
    return written


def plot_timeline(spans: Sequence[Mapping[str, Any]], path: Path, max_steps: int = 5) -> Path:
    """A Gantt chart of the last ``max_steps`` steps: phases on one row, generation below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = sorted({int(s["step"]) for s in spans})[-max_steps:]
    spans = [s for s in spans if int(s["step"]) in steps]
    colors = {
        "wake": "#e6550d",
        "sleep": "#fd8d3c",
        "rollout": "#9ecae1",
        "generate": "#08519c",
        "reward": "#fdae6b",
        "train": "#31a354",
        "sync": "#756bb1",
        "eval": "#bdbdbd",
        "checkpoint": "#636363",
    }
    rows = {"phase": 1, "generate": 0}
    fig, ax = plt.subplots(figsize=(9, 2.6))
    t0 = min(float(s["start"]) for s in spans)
    seen = set()
    for s in spans:
        name = str(s["phase"])
        y = rows["generate"] if name == "generate" else rows["phase"]
        label = name if name not in seen else None
        seen.add(name)
        ax.broken_barh(
            [(float(s["start"]) - t0, float(s["end"]) - float(s["start"]))],
            (y - 0.4, 0.8),
            facecolors=colors.get(name, "#cccccc"),
            label=label,
        )
    ax.set_yticks([0, 1], ["engine busy", "loop phase"])
    ax.set_xlabel("seconds")
    ax.set_title(
        f"timeline of steps {steps[0]}-{steps[-1]} (gaps in 'engine busy' during rollout = bubbles)"
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=9, fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    return path
