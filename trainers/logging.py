"""Metrics to JSONL, a few sample episodes per step, and PNG plots at the end of a run.

The rows also reach the run's trackers (TensorBoard, W&B: ``run.report_to``) when
:func:`~agentgym.trainers.tracking.start_tracking` attached them to the writers; the
plots reach them from :func:`plot_run`, which then closes them.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym import TURN_KINDS
from agentgym.trainers.tracking import close_tracking, start_tracking, trackers_for

__all__ = [
    "JsonlWriter",
    "SampleLog",
    "finite_mean",
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
    ``metrics`` or ``timeline``, says what the row is). ``check``: called on every row
    before it is written (the metrics log's key table, under ``AGENTGYM_STRICT_METRICS``).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        truncate_after_step: int | None = None,
        enabled: bool = True,
        check: Any = None,
    ) -> None:
        self.path = Path(path)
        self.enabled = enabled
        self.check = check
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
        if self.check is not None:
            self.check(row)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({k: _clean(v) for k, v in row.items()}) + "\n")
        if self.trackers is not None:
            self.trackers.on_row(self.path.stem, row)


class SampleLog(JsonlWriter):
    """``samples.jsonl``: what the model wrote. Each step, ``per_step`` of its episodes,
    spread over the step's range of rewards (the worst, the best and between), one row
    each: the step, env, seed, reward (and the shaped reward the update used), the
    reward breakdown, a breakdown by turn kind (:func:`turn_kind_breakdown`), and every
    turn's prompt (the last message the policy saw), reply, token counts and mean log-prob.
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
                    "kinds": turn_kind_breakdown(ep),
                    "turns": [
                        {
                            "conversation": t.conversation,
                            "kind": t.kind,
                            "prompt": t.messages[-1].content if t.messages else "",
                            "reply": t.completion.text,
                            "tokens": t.completion.num_tokens,
                            "prompt_tokens": t.completion.prompt_tokens,
                            "logprob_mean": _mean_or_none(t.completion.logprobs),
                            "finish_reason": t.completion.finish_reason,
                        }
                        for t in ep.turns
                    ],
                }
            )


def turn_kind_breakdown(ep: Any) -> dict[str, dict[str, Any]]:
    """Per turn kind (``act``, ``summary``) of one episode: turns, tokens written, the
    largest prompt (working context) and the mean log-prob the sampler gave its tokens
    (how sure the policy was of what it wrote; ``None`` without log-probs)."""
    out = {}
    for kind in TURN_KINDS:
        turns = [t for t in ep.turns if t.kind == kind]
        logprobs = [x for t in turns for x in t.completion.logprobs]
        out[kind] = {
            "turns": len(turns),
            "tokens": sum(t.completion.num_tokens or 0 for t in turns),
            "prompt_tokens_max": max((t.completion.prompt_tokens or 0 for t in turns), default=0),
            "logprob_mean": _mean_or_none(logprobs),
        }
    return out


def _mean_or_none(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def finite_mean(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    """The mean of ``key`` over the rows that hold a finite number for it, or None."""
    vals = [r[key] for r in rows if isinstance(r.get(key), int | float)]
    vals = [v for v in vals if math.isfinite(v)]
    return sum(vals) / len(vals) if vals else None


def train_summary(rows: Sequence[Mapping[str, Any]], out: str | Path) -> str:
    """A few lines on a finished run from its step rows: steps, time, the first and last
    steps' reward, accuracy and reply length, and where to look next."""
    steps = [r for r in rows if "charts/reward" in r]
    if not steps:
        return f"no training steps recorded in {out}/metrics.jsonl"

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
    lines = [
        f"{did} ({finite_mean(steps, 'time/step_s') or 0:.1f} s/step); first {k} vs last {k} steps:"
    ]
    for key, name in (
        ("charts/reward", "reward"),
        ("charts/accuracy", "accuracy"),
        ("charts/response_tokens_mean", "reply tokens"),
    ):
        a, b = finite_mean(head, key), finite_mean(tail, key)
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
    ("losses/value", "vloss"),
    ("critic/explained_variance", "ev"),
    ("losses/approx_kl_ref", "kl"),
    ("charts/lr", "lr"),
    ("charts/idle_share", "idle"),
    ("time/step_s", "s/step"),
)
#: shown only when they move: the policy-gradient surrogate is zero by construction at
#: the start of an on-policy update (ratio 1, advantages centred), and the KL is logged
#: as 0 when it is off
_QUIET_WHEN_ZERO = {"loss": 1e-6, "kl": 0.0}


def progress_stats(metrics: dict[str, Any]) -> dict[str, Any]:
    """The :data:`PROGRESS_KEYS` present in a step's metrics, under their short names
    (a surrogate loss or KL that is zero left out: it says nothing)."""
    out = {}
    for key, short in PROGRESS_KEYS:
        value = metrics.get(key)
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            continue
        if short in _QUIET_WHEN_ZERO and abs(value) <= _QUIET_WHEN_ZERO[short]:
            continue
        out[short] = value
    return out


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
    every = read_jsonl(run_dir / "metrics.jsonl")
    rows = [r for r in every if "charts/reward" in r]
    out_dir = run_dir / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    if rows:
        evals = [r for r in every if "eval/reward" in r]
        written.append(_plot_reward(plt, rows, evals, out_dir / "reward.png", run_dir.name))
        written.append(_plot_lengths(plt, rows, out_dir / "response_length.png", run_dir.name))
        training = _plot_training(
            plt, rows, out_dir / "training.png", run_dir.name, kl_off=_kl_off(run_dir, rows)
        )
        if training is not None:
            written.append(training)
    spans = read_jsonl(run_dir / "timeline.jsonl")
    if spans:
        evals_s = {
            int(r["step"]): float(r["time/eval_s"])
            for r in every
            if isinstance(r.get("time/eval_s"), int | float) and r["time/eval_s"] > 0
        }
        written.append(
            plot_timeline(spans, out_dir / "timeline.png", evals=evals_s, title=run_dir.name)
        )
    plt.close("all")
    return written


def _finite_points(
    rows: Sequence[Mapping[str, Any]], key: str
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The (step, value) pairs of ``key`` whose value is a finite number."""
    pts = [
        (int(r["step"]), float(r[key]))
        for r in rows
        if isinstance(r.get(key), int | float) and math.isfinite(r[key])
    ]
    return tuple(p[0] for p in pts), tuple(p[1] for p in pts)


def _sparse(xs: Sequence[int]) -> bool:
    """Whether points at steps ``xs`` skip steps (evaluations every N steps)."""
    return any(b - a > 1 for a, b in itertools.pairwise(xs))


def _draw_series(ax: Any, series: Sequence[tuple]) -> int:
    """Draw each ``(rows, key, label, style)`` by its finite values only, so that
    the legend names only lines that are drawn: a series without one is left out, one
    equal to a series already drawn joins that line's label, and points carry markers
    where a line alone could hide them (few steps); a series measured at a few steps only
    (evaluations) is markers without a line, its steps in its label. Integer step ticks.
    Returns the number of lines drawn."""
    from matplotlib.ticker import MaxNLocator

    drawn: list[tuple[tuple, tuple, Any]] = []
    for rows, key, label, style in series:
        xs, ys = _finite_points(rows, key)
        if not xs:
            continue
        same = next((d for d in drawn if d[0] == xs and d[1] == ys), None)
        if same is not None:
            same[2].set_label(f"{same[2].get_label()} = {label}")
            continue
        kw = {"marker": "o", "markersize": 3} if len(xs) <= 30 else {}
        if _sparse(xs):  # measured at a few steps only: no line implies what came between
            kw = {"marker": "o", "markersize": 6, "linestyle": "none"}
            at = ", ".join(map(str, xs)) if len(xs) <= 5 else f"{len(xs)} steps"
            label = f"{label} (steps {at})" if len(xs) <= 5 else f"{label} ({at})"
        (line,) = ax.plot(xs, ys, label=label, **{**style, **kw})
        drawn.append((xs, ys, line))
    steps = sorted({x for xs, _, _ in drawn for x in xs})
    if 0 < len(steps) <= 12:
        ax.set_xticks(steps)  # few steps: each one, and only whole steps
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if not drawn:
        ax.text(0.5, 0.5, "no finite values", ha="center", va="center", transform=ax.transAxes)
    return len(drawn)


def _plot_reward(plt: Any, rows: list, evals: list, path: Path, name: str) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    n = _draw_series(
        ax,
        [
            (rows, "charts/reward", "train reward (shaped)", {}),
            (rows, "charts/accuracy", "train accuracy", {}),
            (evals, "eval/reward", "held-out reward", {"marker": "o", "markersize": 5}),
        ],
    )
    ax.set_ylabel("reward")
    ax.set_title(f"reward per step: {name}")
    if n:
        ax.legend()
    fig.tight_layout()
    return _save(fig, path)


def _per_turn(rows: Sequence[Mapping[str, Any]], kind: str) -> list[dict[str, Any]]:
    """Rows with ``kind``'s mean trained tokens per turn (``kinds/<kind>_tokens`` over
    ``kinds/<kind>_turns``), where the step had such turns."""
    out = []
    for r in rows:
        turns, tokens = r.get(f"kinds/{kind}_turns"), r.get(f"kinds/{kind}_tokens")
        if isinstance(turns, int | float) and turns > 0 and isinstance(tokens, int | float):
            out.append({"step": r["step"], "tokens": tokens / turns})
    return out


def _plot_lengths(plt: Any, rows: list, path: Path, name: str) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    series = [
        (rows, "charts/response_tokens_mean", "mean", {}),
        (rows, "charts/response_tokens_max", "max", {}),
    ]
    summaries = _per_turn(rows, "summary")
    if summaries:  # multi-conversation episodes: what each kind of turn writes
        series += [
            (_per_turn(rows, "act"), "tokens", "act turns (mean)", {"linestyle": "--"}),
            (summaries, "tokens", "summary turns (mean)", {"linestyle": ":"}),
        ]
    n = _draw_series(ax, series)
    ax.set_ylabel("response tokens")
    ax.set_title(f"response length per step: {name}")
    if n:
        ax.legend()
    fig.tight_layout()
    return _save(fig, path)


def _kl_off(run_dir: Path, rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the run trained without a KL term: its config says ``kl_coef: 0``, or
    (no config) every KL value logged is 0."""
    import yaml

    try:
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8")) or {}
        return float((cfg.get("algorithm") or {}).get("kl_coef", 0.0)) == 0.0
    except (OSError, yaml.YAMLError, TypeError, ValueError, AttributeError):
        keys = ("losses/kl", "losses/approx_kl_ref")
        return all(r.get(k, 0.0) == 0.0 for r in rows for k in keys)


def _plot_training(
    plt: Any, rows: list, path: Path, name: str, *, kl_off: bool = False
) -> Path | None:
    panels = [
        (title, keys)
        for title, keys in TRAINING_PANELS
        if any(_has(rows, k) for k in keys) and not (kl_off and title == "KL")
    ]
    if not panels:
        return None
    cols = min(3, len(panels))
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3 * nrows + 0.4), squeeze=False)
    for ax, (title, keys) in zip(axes.flat, panels, strict=False):
        series = [(rows, k, k.split("/")[-1], {}) for k in keys if _has(rows, k)]
        if _draw_series(ax, series) and len(keys) > 1:
            ax.legend(fontsize=8)
        ax.set_title(title, fontsize=10)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(f"training: {name}")
    fig.tight_layout()
    return _save(fig, path)


#: the timeline's colour of each phase
PHASE_COLORS = {
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


def _process_segments(
    by_step: Mapping[int, list[tuple[str, float, float]]], steps: Sequence[int]
) -> list[list[int]]:
    """The steps grouped by the process that ran them. Times in ``timeline.jsonl`` are
    seconds on the clock of the process that wrote them, so a resumed run's first step
    starts before the previous step ended (a new clock), or -- after a checkpoint,
    where nothing untimed runs before the next step -- well after it."""
    segments = [[steps[0]]]
    lengths = sorted(
        max(e for _, _, e in by_step[s]) - min(b for _, b, _ in by_step[s]) for s in steps
    )
    pause = max(2.0, lengths[len(lengths) // 2])
    for prev, step in itertools.pairwise(steps):
        end = max(e for _, _, e in by_step[prev])
        start = min(b for _, b, _ in by_step[step])
        saved = any(p == "checkpoint" for p, _, _ in by_step[prev])
        if start < end - 1e-6 or (saved and start - end > pause):
            segments.append([])
        segments[-1].append(step)
    return segments


def _timeline_spans(
    spans: Sequence[Mapping[str, Any]], steps: Sequence[int], evals: Mapping[int, float]
) -> dict[int, list[tuple[str, float, float]]]:
    """Each step's ``(phase, start, end)``; an evaluation that ``metrics.jsonl`` timed
    (``time/eval_s``) but the timeline did not is placed where the loop runs it: right
    after the step's last phase, before its checkpoint."""
    by_step: dict[int, list[tuple[str, float, float]]] = {s: [] for s in steps}
    for s in spans:
        if int(s["step"]) in by_step:
            by_step[int(s["step"])].append((str(s["phase"]), float(s["start"]), float(s["end"])))
    for step, items in by_step.items():
        if evals.get(step) and not any(p == "eval" for p, _, _ in items):
            end = max((e for p, _, e in items if p != "checkpoint"), default=0.0)
            items.append(("eval", end, end + evals[step]))
    return by_step


def plot_timeline(
    spans: Sequence[Mapping[str, Any]],
    path: Path,
    max_steps: int = 5,
    *,
    evals: Mapping[int, float] | None = None,
    title: str | None = None,
) -> Path:
    """A Gantt chart of the last ``max_steps`` steps: phases on one row, generation below.

    ``evals`` (step -> seconds, ``time/eval_s``) fills in evaluations the timeline does
    not hold. A resume (a new process, on its own clock) is laid out after the steps
    before it and marked with a dashed line; the legend names only the phases wide
    enough to see, and a note names the others.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = sorted({int(s["step"]) for s in spans})[-max_steps:]
    by_step = _timeline_spans(spans, steps, evals or {})
    fig, ax = plt.subplots(figsize=(9, 3.2))
    width, widths, resumes = _draw_timeline(ax, by_step, _process_segments(by_step, steps))
    for x, after in resumes:
        ax.axvline(x, color="black", linestyle="--", linewidth=1)
        ax.text(
            x,
            1.5,
            f"resumed after step {after}",
            ha="center",
            va="bottom",
            fontsize=8,
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
        )
    ax.set_ylim(-0.5, 1.85 if resumes else 1.5)
    ax.set_yticks([0, 1], ["engine busy", "loop phase"])
    clock = "; each process on its own clock" if resumes else ""
    ax.set_xlabel(f"seconds{clock}")
    name = f": {title}" if title else ""
    ax.set_title(
        f"timeline of steps {steps[0]}-{steps[-1]}{name}\n"
        "(gaps in 'engine busy' during rollout = bubbles)",
        fontsize=10,
    )
    _timeline_legend(fig, widths, width)
    fig.subplots_adjust(left=0.12, right=0.98, top=0.8, bottom=0.37)
    return _save(fig, path)


def _draw_timeline(
    ax: Any, by_step: Mapping[int, list[tuple[str, float, float]]], segments: list[list[int]]
) -> tuple[float, dict[str, float], list[tuple[float, int]]]:
    """Draw each process's steps after the previous process's, a small break between
    them. Returns the drawn width in seconds, each phase's widest span, and the breaks
    (x, the last step before it)."""
    bounds = [
        (
            min(b for s in seg for _, b, _ in by_step[s]),
            max(e for s in seg for _, _, e in by_step[s]),
        )
        for seg in segments
    ]
    gap = 0.04 * sum(hi - lo for lo, hi in bounds) or 1.0
    offset, widths, resumes = 0.0, {}, []
    for i, (seg, (lo, hi)) in enumerate(zip(segments, bounds, strict=True)):
        if i:
            resumes.append((offset + gap / 2, seg[0] - 1))
            offset += gap
        for step in seg:
            for phase, b, e in by_step[step]:
                y = 0 if phase == "generate" else 1
                ax.broken_barh(
                    [(offset + b - lo, e - b)],
                    (y - 0.4, 0.8),
                    facecolors=PHASE_COLORS.get(phase, "#cccccc"),
                    hatch="//" if phase == "eval" else None,
                )
                widths[phase] = max(widths.get(phase, 0.0), e - b)
        offset += hi - lo
    return offset, widths, resumes


def _timeline_legend(fig: Any, widths: Mapping[str, float], width: float) -> None:
    """A legend of the phases wide enough to see (0.3% of the plot), a note naming the
    others."""
    from matplotlib.patches import Patch

    seen = [p for p in PHASE_COLORS if p in widths] + [p for p in widths if p not in PHASE_COLORS]
    visible = [p for p in seen if widths[p] >= 0.003 * width]
    handles = [
        Patch(
            facecolor=PHASE_COLORS.get(p, "#cccccc"), hatch="//" if p == "eval" else None, label=p
        )
        for p in visible
    ]
    if handles:
        fig.legend(
            handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.09), ncol=9, fontsize=8
        )
    hidden = [p for p in seen if p not in visible]
    if hidden:
        note = f"too short to see at this scale: {', '.join(hidden)}"
        fig.text(0.5, 0.015, note, ha="center", va="bottom", fontsize=7)


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    return path
