"""``agentgym bench`` as a subprocess: listing, errors, a run and its resume."""

from __future__ import annotations

import json


def test_bench_list_shows_the_builtin_suites(cli):
    r = cli("bench", "--list")
    assert r.returncode == 0, r.stderr
    names = [line.split()[0] for line in r.stdout.splitlines()]
    assert names == ["appgen", "math-balanced", "memory-recall"]


def test_bench_errors_say_what_to_do(cli, tmp_path):
    r = cli("bench", "memory-recall", "--out", str(tmp_path))
    assert r.returncode == 2 and "--policy" in r.stderr
    r = cli("bench", "memory-recal", "--policy", "oracle", "--out", str(tmp_path))
    assert r.returncode == 2 and "Did you mean: 'memory-recall'" in r.stderr
    r = cli("bench", "memory-recall", "--policy", "nonsense", "--out", str(tmp_path))
    assert r.returncode == 2 and "Unknown policy" in r.stderr
    r = cli("bench")
    assert r.returncode == 2 and "bench --list" in r.stderr


def test_bench_runs_then_a_rerun_has_nothing_left_to_do(cli, tiny_suite_file, tmp_path):
    out = tmp_path / "res"
    r = cli("bench", str(tiny_suite_file), "--policy", "oracle", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "12/12 episodes (complete; 0 resumed, 12 new)" in r.stdout
    assert "mean reward: 1.0000" in r.stdout
    r = cli(
        "bench", str(tiny_suite_file), "--policy", "oracle", "--out", str(out), "--json",
        "--label", "the oracle",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["resumed_episodes"] == 12 and res["new_episodes"] == 0
    assert res["policy"]["label"] == "the oracle"
    assert res["metrics"]["reward"]["value"] == 1.0
    assert len(list(out.glob("memory-mini-*/oracle/result.json"))) == 1
    assert len(list(out.glob("memory-mini-*/suite.json"))) == 1
