"""The run's PNG plots say what they show: a title each, whole-number step ticks, a
legend naming only lines that are drawn, and a timeline that marks a resume.

The figures are caught as ``plot_run`` saves them (``_save``), so the tests read the
axes a person would see, not the pixels.
"""

from __future__ import annotations

import itertools
import json
import math

import pytest

import agentgym.trainers.logging as run_logging


@pytest.fixture
def figures(monkeypatch):
    """{file name: figure} of every plot written, kept open for the test to read."""
    caught = {}
    save = run_logging._save

    def keep(fig, path):
        caught[path.name] = fig
        return save(fig, path)

    monkeypatch.setattr(run_logging, "_save", keep)
    yield caught
    import matplotlib.pyplot as plt

    plt.close("all")


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _metrics(steps):
    """Two-step-ish metrics: accuracy equal to the reward (one line would hide the
    other), a held-out evaluation at the last step only, a KL that is never logged."""
    rows = []
    for i, step in enumerate(steps):
        reward = 0.25 * (i + 1)
        rows.append(
            {
                "step": step,
                "charts/reward": reward,
                "charts/accuracy": reward,
                "charts/response_tokens_mean": 10.0 + i,
                "charts/response_tokens_max": 12.0 + i,
                "losses/total": 0.5 / (i + 1),
                "losses/policy": 0.4 / (i + 1),
                "losses/grad_norm": 1.0,
            }
        )
    rows[-1]["eval/reward"] = 0.5
    return rows


def _drawn_lines(ax):
    """The lines of ``ax`` a reader can see: at least one finite point, and either two
    points or a marker."""
    seen = []
    for line in ax.get_lines():
        xs = [
            x for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True) if math.isfinite(y)
        ]
        if xs and (len(xs) > 1 or line.get_marker() not in (None, "None", "", " ")):
            seen.append(line)
    return seen


def _check_axes(ax):
    texts = [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []
    lines = _drawn_lines(ax)
    assert all(any(line.get_label() == t for line in lines) for t in texts), texts
    data = [(tuple(line.get_xdata()), tuple(line.get_ydata())) for line in lines]
    assert len(set(data)) == len(data), f"a line hides another: {texts}"
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    return texts


@pytest.mark.parametrize("steps", [[1, 2], [1]])
def test_step_plots_have_titles_integer_ticks_and_legends_of_drawn_lines(tmp_path, figures, steps):
    run = tmp_path / "my_run"
    run.mkdir()
    _write(run / "metrics.jsonl", _metrics(steps))
    run_logging.plot_run(run)
    assert {"reward.png", "response_length.png", "training.png"} <= set(figures)

    (ax,) = figures["reward.png"].axes
    assert "my_run" in ax.get_title()
    texts = _check_axes(ax)
    assert texts == ["train reward (shaped) = train accuracy", "held-out reward"]

    (ax,) = figures["response_length.png"].axes
    assert ax.get_title() and _check_axes(ax) == ["mean", "max"]

    fig = figures["training.png"]
    assert fig._suptitle is not None and "my_run" in fig._suptitle.get_text()
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["losses", "grad norm"]
    assert _check_axes(panels[0]) == ["total", "policy"]
    _check_axes(panels[1])


def _timeline():
    """Steps 1-2 on the first process's clock (a checkpoint after step 2), then steps
    3-4 after a resume, on a new clock that starts at 0 again; ``sync`` takes 10 us."""
    spans = []
    for step, t in ((1, 50.0), (2, 54.0), (3, 1.0), (4, 5.0)):
        spans += [
            {"step": step, "phase": "rollout", "start": t, "end": t + 2.0},
            {"step": step, "phase": "generate", "start": t + 0.2, "end": t + 1.8},
            {"step": step, "phase": "train", "start": t + 2.0, "end": t + 3.5},
            {"step": step, "phase": "sync", "start": t + 3.5, "end": t + 3.50001},
        ]
    spans.append({"step": 2, "phase": "checkpoint", "start": 57.6, "end": 58.0})
    return spans


def _bars(ax, row):
    """(x0, x1) of the bars in one row (0: engine busy, 1: loop phase), by start."""
    out = []
    for coll in ax.collections:
        for path in coll.get_paths():
            box = path.get_extents()
            if abs((box.y0 + box.y1) / 2 - row) < 0.01:
                out.append((box.x0, box.x1))
    return sorted(out)


def test_the_timeline_marks_a_resume_and_names_only_visible_phases(tmp_path, figures):
    path = run_logging.plot_timeline(_timeline(), tmp_path / "timeline.png")
    assert path.is_file()
    (ax,) = figures["timeline.png"].axes
    assert ax.get_title()
    # the second process's steps follow the first's: no bar overlaps another
    phases = _bars(ax, 1)
    assert len(phases) == 4 * 3 + 1  # rollout, train, sync per step; the checkpoint
    assert all(a[1] <= b[0] + 1e-9 for a, b in itertools.pairwise(phases))
    # the resume point is marked between step 2's checkpoint and step 3
    marks = [t.get_text() for t in ax.texts]
    assert marks == ["resumed after step 2"]
    (line,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    x = line.get_xdata()[0]
    checkpoint_end = max(x1 for _, x1 in phases[:7])
    assert checkpoint_end < x < phases[7][0]
    # the whole plot spans the work done (2 x 8 s of steps and a break), not the clocks
    assert ax.get_xlim()[1] < 30
    fig = figures["timeline.png"]
    legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert legend == ["rollout", "generate", "train", "checkpoint"]
    assert any("sync" in t.get_text() for t in fig.texts)


def test_an_evaluation_timed_in_the_metrics_fills_its_gap_in_the_timeline(tmp_path, figures):
    """The loop times evaluations in metrics.jsonl (time/eval_s), not on the timeline:
    the plot draws one where the loop ran it, after the step's phases."""
    run = tmp_path / "run"
    run.mkdir()
    _write(run / "metrics.jsonl", [{**_metrics([4])[0], "time/eval_s": 1.0}])
    _write(run / "timeline.jsonl", [s for s in _timeline() if s["step"] >= 3])
    run_logging.plot_run(run)
    fig = figures["timeline.png"]
    (ax,) = fig.axes
    phases = _bars(ax, 1)
    assert phases[-1] == pytest.approx((7.5, 8.5), abs=1e-4)  # step 4's sync ends at 7.5 s
    legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert legend == ["rollout", "generate", "train", "eval"]
    assert "run" in ax.get_title()


def test_a_timeline_of_one_process_has_no_resume_mark(tmp_path, figures):
    spans = [s for s in _timeline() if s["step"] <= 2]
    run_logging.plot_timeline(spans, tmp_path / "timeline.png")
    (ax,) = figures["timeline.png"].axes
    assert not ax.texts and not [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    phases = _bars(ax, 1)
    # one clock: the bars keep their own distances (step 2 starts 4 s after step 1)
    assert phases[0][0] == pytest.approx(0.0) and phases[3][0] == pytest.approx(4.0)


# ------------------------------------------------- issue 44: plots imply only what was measured


def _sparse_run(tmp_path, *, kl_coef=0.0, summaries=True):
    """Ten steps, held-out evaluations at steps 0 and 10 only, KL off (logged as 0),
    MemoryRecall-like act and summary turns."""
    run = tmp_path / "sparse"
    run.mkdir()
    rows = [{"step": 0, "eval/reward": 0.2}]
    for step in range(1, 11):
        row = {
            "step": step,
            "charts/reward": 0.1 * step,
            "charts/response_tokens_mean": 11.4,  # (40 + 120) / 14 turns
            "charts/response_tokens_max": 30.0,
            "losses/total": 1e-8,
            "losses/kl": 0.0 if not kl_coef else 0.01 * step,
            "losses/approx_kl_ref": 0.0 if not kl_coef else 0.02 * step,
            "losses/grad_norm": 1.0,
            "kinds/act_turns": 8.0,
            "kinds/act_tokens": 40.0,
            "kinds/summary_turns": 6.0 if summaries else 0.0,
            "kinds/summary_tokens": 120.0 if summaries else 0.0,
        }
        rows.append(row)
    rows[-1]["eval/reward"] = 0.9
    _write(run / "metrics.jsonl", rows)
    (run / "config.yaml").write_text(f"algorithm: {{kl_coef: {kl_coef}}}\nrollout: {{}}\n")
    return run


def test_sparse_evaluations_are_points_not_a_line(tmp_path, figures):
    run_logging.plot_run(_sparse_run(tmp_path))
    (ax,) = figures["reward.png"].axes
    held = next(line for line in ax.get_lines() if "held-out" in line.get_label())
    assert held.get_linestyle() in ("None", "", " ", "none")  # no line between steps 0 and 10
    assert held.get_marker() not in (None, "None", "", " ")
    assert "steps 0, 10" in held.get_label()
    train = next(line for line in ax.get_lines() if "train reward" in line.get_label())
    assert train.get_linestyle() == "-"  # measured at every step: a line


def test_no_kl_panel_when_kl_is_off(tmp_path, figures):
    run_logging.plot_run(_sparse_run(tmp_path))
    titles = [ax.get_title() for ax in figures["training.png"].axes if ax.get_visible()]
    assert "KL" not in titles
    figures.clear()
    on = tmp_path / "on"
    on.mkdir()
    run_logging.plot_run(_sparse_run(on, kl_coef=0.04))
    titles = [ax.get_title() for ax in figures["training.png"].axes if ax.get_visible()]
    assert "KL" in titles


def test_reply_lengths_split_act_and_summary_turns(tmp_path, figures):
    run_logging.plot_run(_sparse_run(tmp_path))
    (ax,) = figures["response_length.png"].axes
    labels = [line.get_label() for line in _drawn_lines(ax)]
    act = next(line for line in ax.get_lines() if line.get_label().startswith("act"))
    summary = next(line for line in ax.get_lines() if line.get_label().startswith("summary"))
    assert list(act.get_ydata()) == [5.0] * 10 and list(summary.get_ydata()) == [20.0] * 10
    assert len(labels) == 4, labels


def test_the_progress_line_shows_what_moves():
    vapo = {
        "charts/reward": 0.5,
        "losses/total": -2.5e-8,  # the surrogate at ratio 1: zero by construction
        "losses/kl": 0.0,
        "losses/approx_kl_ref": 0.0,
        "losses/value": 0.0114,
        "critic/explained_variance": 0.31,
        "charts/lr": 1e-4,
    }
    shown = run_logging.progress_stats(vapo)
    assert shown["vloss"] == 0.0114 and shown["ev"] == 0.31
    assert "kl" not in shown and "loss" not in shown
    assert run_logging.progress_stats({"losses/total": 0.7, "losses/approx_kl_ref": 0.01}) == {
        "loss": 0.7,
        "kl": 0.01,
    }
