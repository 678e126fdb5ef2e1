"""The leaderboard: results folders in, a Markdown table and a static HTML page out.

:func:`collect_results` finds every ``result.json`` under a folder. Results are grouped
by suite *and suite hash*, so results of different suite versions are never ranked
together. Within a group, rows are ranked by the suite's primary metric (higher first),
ties broken by fewer mean tokens, then by name. Partial results (``--limit``, an
interrupted run) are left out unless asked for, since they cover fewer tasks.

:func:`build_leaderboard` writes ``SITE/leaderboard.md`` and ``SITE/index.html``. The page
is one self-contained file: inline CSS and JavaScript, the data embedded as JSON, no
external resources, so it works opened straight from the file system. It shows, per
suite, a sortable table (click a header; ``#sort=METRIC`` or ``#sort=METRIC:asc`` in the
URL sorts on load) and an SVG plot of the suite's score against mean tokens with the
Pareto frontier drawn through the points no other point beats on both axes.

A result whose episodes were graded without isolation (``graded_without_isolation`` in
its ``result.json``: AppGen on the local backend) is marked "graded without isolation"
in both: its scores do not show that the policy could not rewrite its grader.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agentgym import ConfigError, DataError
from agentgym.benchmarks.metrics import LOWER_IS_BETTER
from agentgym.benchmarks.runner import RESULT_FILE, RESULT_SCHEMA


def collect_results(results_dir: str | Path, *, include_partial: bool = False) -> list[dict]:
    """Every valid result under ``results_dir`` (recursively), with ``_path`` added."""
    root = Path(results_dir)
    if not root.is_dir():
        raise ConfigError(
            f"Results folder {root} does not exist. Run `agentgym bench SUITE --policy P "
            f"--out {root}` first."
        )
    out: list[dict] = []
    for path in sorted(root.rglob(RESULT_FILE)):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise DataError(f"{path}: not a readable result file ({e}).") from e
        if not isinstance(data, dict) or data.get("schema") != RESULT_SCHEMA:
            continue
        if not data.get("complete") and not include_partial:
            continue
        data["_path"] = str(path)
        out.append(data)
    return out


def _value(result: dict, metric: str) -> float | None:
    v = (result.get("metrics", {}).get(metric) or {}).get("value")
    return None if v is None else float(v)


def rank_key(result: dict) -> tuple:
    """Sort key: primary metric (best first), then fewer mean tokens, then the label."""
    primary = result["suite"]["primary_metric"]
    v = _value(result, primary)
    v_key = math.inf if v is None else (v if primary in LOWER_IS_BETTER else -v)
    tokens = _value(result, "mean_tokens")
    return (v_key, math.inf if tokens is None else tokens, result["policy"].get("label", ""))


def group_results(results: Iterable[dict]) -> list[dict]:
    """``[{suite, hash, results (ranked)}]``, one group per (suite name, suite hash)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in results:
        groups.setdefault((r["suite"]["name"], r["suite"]["hash"]), []).append(r)
    out = []
    for (name, h), rows in sorted(groups.items()):
        rows = sorted(rows, key=rank_key)
        out.append({"suite": rows[0]["suite"], "name": name, "hash": h, "results": rows})
    return out


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats: fewer-or-equal x and higher-or-equal y,
    strictly better on one. Ordered by x."""
    front = []
    for i, (xi, yi) in enumerate(points):
        dominated = any(
            (xj <= xi and yj >= yi) and (xj < xi or yj > yi)
            for j, (xj, yj) in enumerate(points)
            if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: (points[i][0], -points[i][1]))


# ------------------------------------------------------------------------------ markdown


def _fmt(metric: str, cell: dict | None) -> str:
    if not cell or cell.get("value") is None:
        return "–"
    v, lo, hi = cell["value"], cell.get("ci_low"), cell.get("ci_high")
    if metric == "mean_tokens":
        s = f"{v:.1f}"
        return s + (f" [{lo:.1f}, {hi:.1f}]" if lo is not None and hi is not None else "")
    s = f"{v:.3f}"
    return s + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else "")


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(groups: list[dict]) -> str:
    """The leaderboard as Markdown: one ranked table per suite version."""
    lines = ["# agentgym leaderboard", ""]
    if not groups:
        lines += ["No complete results found.", ""]
    for g in groups:
        suite = g["suite"]
        metrics = list(suite["metrics"])
        labels = g["results"][0].get("labels", {})
        lines += [
            f"## {g['name']} (v{suite['version']}, hash `{g['hash'][:12]}`)",
            "",
            f"{suite.get('description', '')} {suite['num_tasks']} tasks × "
            f"{suite['samples_per_task']} samples; ranked by {labels.get(suite['primary_metric'], suite['primary_metric'])}. "
            "Brackets: 95% bootstrap interval over tasks.",
            "",
        ]
        header = ["rank", "policy", *[labels.get(m, m) for m in metrics], "episodes"]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join(["---:", "---"] + ["---:"] * (len(header) - 2)) + "|")
        for rank, r in enumerate(g["results"], start=1):
            label = r["policy"].get("label") or r["policy"].get("spec", "?")
            partial = "" if r.get("complete") else " (partial)"
            partial += " (graded without isolation)" if r.get("graded_without_isolation") else ""
            cells = [
                str(rank),
                _md_escape(label) + partial,
                *[_fmt(m, r["metrics"].get(m)) for m in metrics],
                f"{r['episodes']}/{r['expected_episodes']}",
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ html


def page_data(groups: list[dict]) -> dict[str, Any]:
    """What the page embeds: only the fields it shows (no per-task lists)."""
    suites = []
    for g in groups:
        suite = g["suite"]
        rows = []
        points = []
        for rank, r in enumerate(g["results"], start=1):
            rows.append(
                {
                    "rank": rank,
                    "label": r["policy"].get("label") or r["policy"].get("spec", "?"),
                    "spec": r["policy"].get("spec", ""),
                    "complete": bool(r.get("complete")),
                    "unisolated": bool(r.get("graded_without_isolation")),
                    "episodes": r.get("episodes", 0),
                    "expected": r.get("expected_episodes", 0),
                    "metrics": {m: r["metrics"].get(m) for m in suite["metrics"]},
                    "wall_time_s": r.get("wall_time_s"),
                    "created": r.get("created", ""),
                }
            )
            x, y = _value(r, "mean_tokens"), _value(r, suite["plot_metric"])
            points.append((x, y))
        valid = [i for i, (x, y) in enumerate(points) if x is not None and y is not None]
        front = pareto_front([points[i] for i in valid])  # type: ignore[misc]
        for n in front:
            rows[valid[n]]["pareto"] = True
        suites.append(
            {
                "name": g["name"],
                "hash": g["hash"],
                "version": suite["version"],
                "description": suite.get("description", ""),
                "num_tasks": suite["num_tasks"],
                "k": suite["samples_per_task"],
                "metrics": list(suite["metrics"]),
                "labels": g["results"][0].get("labels", {}),
                "primary": suite["primary_metric"],
                "plot_metric": suite["plot_metric"],
                "lower_is_better": sorted(LOWER_IS_BETTER),
                "rows": rows,
            }
        )
    return {
        "generated": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "suites": suites,
    }


def render_html(groups: list[dict]) -> str:
    """The self-contained leaderboard page."""
    from agentgym.benchmarks._page import PAGE

    data = json.dumps(page_data(groups), ensure_ascii=True, allow_nan=False)
    # JSON inside <script>: make "</script>" and "<!--" impossible
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    title = "agentgym leaderboard"
    return PAGE.replace("__TITLE__", html.escape(title)).replace("__DATA__", data)


def build_leaderboard(
    results_dir: str | Path, site_dir: str | Path, *, include_partial: bool = False
) -> dict[str, Any]:
    """Write ``leaderboard.md`` and ``index.html`` into ``site_dir``; returns a summary."""
    results = collect_results(results_dir, include_partial=include_partial)
    left_out = (
        []
        if include_partial
        else [
            r for r in collect_results(results_dir, include_partial=True) if not r.get("complete")
        ]
    )
    groups = group_results(results)
    site = Path(site_dir)
    site.mkdir(parents=True, exist_ok=True)
    md_path = site / "leaderboard.md"
    html_path = site / "index.html"
    md_path.write_text(render_markdown(groups), encoding="utf-8")
    html_path.write_text(render_html(groups), encoding="utf-8")
    return {
        "markdown": str(md_path),
        "html": str(html_path),
        "suites": {
            f"{g['name']}@{g['hash'][:12]}": [
                r["policy"].get("label") or r["policy"].get("spec") for r in g["results"]
            ]
            for g in groups
        },
        "left_out_partial": [
            f"{r['suite']['name']}: {r['policy'].get('label') or r['policy'].get('spec')} "
            f"({r.get('episodes', 0)}/{r.get('expected_episodes', '?')} episodes)"
            for r in left_out
        ],
    }
