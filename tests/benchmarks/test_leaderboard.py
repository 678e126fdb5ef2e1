"""The leaderboard: grouping by suite hash, ranking, Pareto frontier, Markdown, CLI."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from agentgym.benchmarks.leaderboard import (
    build_leaderboard,
    collect_results,
    group_results,
    pareto_front,
    render_html,
)
from agentgym.benchmarks.runner import run_suite
from agentgym.errors import ConfigError


@pytest.fixture
def results_dir(tmp_path, tiny_suite, specs):
    out = tmp_path / "results"
    # listed worst first, so the ranking cannot come from the order of the runs
    for name in ("forgetful", "oracle", "hoarder"):
        run_suite(tiny_suite, specs[name], out=out, concurrency=4)
    # another version of the same suite (k changed): its own group, never mixed in
    run_suite(replace(tiny_suite, samples_per_task=1), specs["forgetful"], out=out)
    # a partial run: left out unless asked for
    run_suite(tiny_suite, "random", out=out, limit=1)
    return out


def test_groups_by_suite_hash_and_ranks_by_the_primary_metric(results_dir, tiny_suite):
    groups = group_results(collect_results(results_dir))
    assert len(groups) == 2
    by_hash = {g["hash"]: g for g in groups}
    main = by_hash[tiny_suite.content_hash()]
    labels = [r["policy"]["label"] for r in main["results"]]
    assert labels == ["oracle", "hoarder (scripted)", "forgetful (scripted)"]
    assert main["results"][1]["policy"]["spec"] == "scripted:agentgym.benchmarks.baselines:hoarder"
    other = by_hash[replace(tiny_suite, samples_per_task=1).content_hash()]
    assert [r["policy"]["label"] for r in other["results"]] == ["forgetful (scripted)"]


def test_partial_results_only_when_asked(results_dir, tiny_suite):
    specs = {r["policy"]["spec"] for r in collect_results(results_dir)}
    assert "random" not in specs
    with_partial = collect_results(results_dir, include_partial=True)
    assert "random" in {r["policy"]["spec"] for r in with_partial}


def test_ties_on_the_primary_metric_go_to_fewer_tokens():
    def res(label, reward, tokens):
        return {
            "suite": {"name": "s", "hash": "h", "primary_metric": "reward"},
            "policy": {"label": label},
            "metrics": {"reward": {"value": reward}, "mean_tokens": {"value": tokens}},
        }

    rows = group_results([res("long", 1.0, 500), res("short", 1.0, 50), res("bad", 0.2, 1)])
    assert [r["policy"]["label"] for r in rows[0]["results"]] == ["short", "long", "bad"]


def test_pareto_front():
    # (tokens, score): b dominates c; a is cheapest; d is best
    pts = [(10, 0.1), (50, 0.6), (80, 0.5), (200, 0.9), (200, 0.9)]
    assert pareto_front(pts) == [0, 1, 3, 4]
    assert pareto_front([]) == []


def test_markdown_and_html_files(results_dir, tmp_path, tiny_suite):
    site = tmp_path / "site"
    summary = build_leaderboard(results_dir, site)
    md = (site / "leaderboard.md").read_text()
    rows = [ln for ln in md.splitlines() if re.match(r"\| \d+ \|", ln)]
    assert rows[0].startswith("| 1 | oracle | 1.000 [1.000, 1.000]")
    assert "hoarder" in rows[1] and "forgetful" in rows[2]
    assert f"hash `{tiny_suite.content_hash()[:12]}`" in md
    page = (site / "index.html").read_text()
    # self-contained: no external scripts, styles, images or fonts
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<link" not in page and "@import" not in page
    data = json.loads(re.search(r'id="leaderboard-data">(.*?)</script>', page, re.S).group(1))
    (suite,) = [s for s in data["suites"] if s["hash"] == tiny_suite.content_hash()]
    assert [(r["rank"], r["label"]) for r in suite["rows"]] == [
        (1, "oracle"),
        (2, "hoarder (scripted)"),
        (3, "forgetful (scripted)"),
    ]
    # oracle: best score; forgetful: fewest tokens; hoarder: beaten by the oracle on both
    assert [bool(r.get("pareto")) for r in suite["rows"]] == [True, False, True]
    assert "tasks" not in suite["rows"][0]  # the page embeds summaries, not raw outcomes
    assert len(summary["suites"]) == 2


def test_embedded_json_cannot_close_the_script_tag():
    group = {
        "suite": {
            "name": "s",
            "version": 1,
            "hash": "0" * 64,
            "num_tasks": 1,
            "samples_per_task": 1,
            "metrics": ["reward", "mean_tokens"],
            "primary_metric": "reward",
            "plot_metric": "reward",
        },
        "name": "s",
        "hash": "0" * 64,
        "results": [
            {
                "policy": {"label": "</script><script>alert(1)</script>", "spec": "x"},
                "metrics": {"reward": {"value": 1.0}, "mean_tokens": {"value": 3.0}},
                "complete": True,
            }
        ],
    }
    page = render_html([group])
    assert page.count("</script>") == 2  # the data block's and the code block's own


def test_leaderboard_cli(results_dir, tmp_path, cli):
    site = tmp_path / "site"
    r = cli("leaderboard", str(results_dir), "--out", str(site), "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    ranked = next(v for v in summary["suites"].values() if len(v) == 3)
    assert ranked == ["oracle", "hoarder (scripted)", "forgetful (scripted)"]
    assert (site / "index.html").is_file() and (site / "leaderboard.md").is_file()
    # the partial run left out is named, with the flag that shows it
    assert [x.split(":")[1].split("(")[0].strip() for x in summary["left_out_partial"]] == [
        "random"
    ]
    assert "left out 1 partial run(s)" in r.stderr and "--include-partial" in r.stderr


def test_missing_results_folder_is_a_clear_error(tmp_path, cli):
    with pytest.raises(ConfigError, match="agentgym bench"):
        collect_results(tmp_path / "nope")
    r = cli("leaderboard", str(tmp_path / "nope"), "--out", str(tmp_path / "s"))
    assert r.returncode == 2 and "does not exist" in r.stderr
