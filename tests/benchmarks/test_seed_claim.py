"""The seed-claim comparison (benchmarks/perf/seed_claim.py) in its smoke form: a warm
start, the six arms, the summary, the table and the curves, from scripts/seed_claim.sh;
and the analysis it reports, on curves computed by hand."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from agentgym.benchmarks.perf.seed_claim import (
    ARMS,
    collapses,
    first_reach,
    format_envs,
    recall_by_part,
    summarise,
    table,
)

REPO = Path(__file__).resolve().parents[2]


def test_the_smoke_form_runs_every_arm_to_the_table_and_the_plot(tmp_path):
    out = tmp_path / "sc"
    env = {**os.environ, "OUT": str(out), "SMOKE": "1", "NICE": "0"}
    r = subprocess.run(
        ["bash", str(REPO / "scripts" / "seed_claim.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rec = json.loads((out / "results.json").read_text())
    assert list(rec["rows"]) == list(ARMS)
    for arm in ARMS:
        run = json.loads((out / "arms" / f"{arm}-s0.json").read_text())
        assert [e["step"] for e in run["evals"]] == [0, 1, 2]
        assert [s["step"] for s in run["steps"]] == [1, 2]
        assert all(0 <= e["sampled"] <= 1 and 0 <= e["greedy"] <= 1 for e in run["evals"])
        assert all(len(e["greedy_by_part"]) == 4 for e in run["evals"])  # 4 parts, 2 asked
        assert all(s["episodes"] > 0 and s["wall_s"] > 0 for s in run["steps"])
    rows = rec["rows"]
    # one conversation holds the whole document: its prompts outgrow the summaries' and
    # the window's (116 tokens by the env's count); every arm trained its own algorithm
    assert rows["long-dapo"]["working_context"] > rows["summary-dapo"]["working_context"]
    assert rows["long-dapo"]["working_context"] > rows["window-grpo"]["working_context"]
    cfg = (out / "runs" / "long-grpo-s0" / "config.yaml").read_text()
    assert "name: grpo" in cfg and "memory: false" in cfg
    table = (out / "table.md").read_text()
    assert all(f"| {arm} |" in table for arm in ARMS) and "steps to summary-dapo" in table
    assert "codes shown in part 1 / 2" in table
    assert (out / "recall.png").read_bytes()[:4] == b"\x89PNG"
    # a second run reuses the warm start and every arm: it only summarises again
    again = subprocess.run(
        ["bash", str(REPO / "scripts" / "seed_claim.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert again.returncode == 0 and "warm start s0: kept from an earlier run" in again.stdout
    assert json.loads((out / "results.json").read_text())["rows"] == rows


def test_the_formats_share_the_tasks_and_differ_in_context():
    summary, long, window = (format_envs(f)[0]["kwargs"] for f in ("summary", "long", "window"))
    task = {k: v for k, v in summary.items() if k != "memory"}
    assert {k: v for k, v in long.items() if k != "memory"} == task
    assert long["memory"] is False and "context_window" not in long
    assert window["context_window"] == 116 and summary["memory"]["every_k_turns"] == 1
    # the summary arm's config trains on the warm start's first env
    rl = yaml.safe_load((REPO / "configs" / "seedclaim_dapo.yaml").read_text())
    assert rl["envs"] == format_envs("summary")


def test_a_collapse_is_a_drop_below_half_the_best_that_lasts():
    # best 0.6 at step 2; 0.2 for 5 more steps: one collapse
    assert collapses([0.2, 0.6, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2]) == 1
    # back above half the best within 5 steps: a dip, not a collapse
    assert collapses([0.2, 0.6, 0.2, 0.2, 0.4, 0.2, 0.2, 0.2]) == 0
    # too few steps left to tell, and drops from a best under 0.1: not counted
    assert collapses([0.6, 0.2, 0.2]) == 0 and collapses([0.08, 0.0, 0, 0, 0, 0, 0]) == 0


def test_steps_to_reach_and_the_summary_of_two_arms():
    def run(seed, sampled, rewards):
        evals = [
            {"step": 5 * i, "sampled": x, "greedy": x / 2, "working_context": 80.0}
            for i, x in enumerate(sampled)
        ]
        steps = [
            {
                "step": i + 1,
                "reward": r,
                "generated_tokens": 100.0,
                "trained_tokens": 50.0,
                "wall_s": 2.0,
            }
            for i, r in enumerate(rewards)
        ]
        return {"seed": seed, "evals": evals, "steps": steps}

    assert first_reach([{"step": 0, "s": 0.1}, {"step": 5, "s": 0.5}], "s", 0.5) == 5
    assert first_reach([{"step": 0, "s": 0.1}], "s", 0.5) is None
    results = {
        "summary-dapo": [run(0, [0.1, 0.5, 0.8], [0.1, 0.3]), run(1, [0.1, 0.7, 0.8], [0.2, 0.4])],
        "long-grpo": [run(0, [0.1, 0.2, 0.4], [0.1, 0.1]), run(1, [0.1, 0.4, 0.6], [0.1, 0.3])],
    }
    rows = summarise(results)
    ref, base = rows["summary-dapo"], rows["long-grpo"]
    assert ref["final_sampled"] == pytest.approx(0.8) and base["final_sampled"] == pytest.approx(
        0.5
    )
    # seed-mean curves: summary-dapo 0.1, 0.6, 0.8; long-grpo 0.1, 0.3, 0.5
    assert ref["steps_to_baseline"] == 5 and base["steps_to_baseline"] == 10
    assert ref["steps_to_reference"] == 10 and base["steps_to_reference"] is None
    assert ref["greedy_lift_per_seed"] == pytest.approx([0.35, 0.35])
    assert ref["reward_step_std"] == pytest.approx(0.0) and base[
        "reward_step_std"
    ] == pytest.approx(0.1)


def test_recall_by_part_counts_each_asked_code_where_it_was_shown():
    """From the env's own breakdown: MemoryRecall says which part showed each asked
    locker; a code answered right counts for its part."""
    import gymnasium as gym

    import agentgym  # noqa: F401 - registers the envs

    kwargs = format_envs("summary")[0]["kwargs"]
    env = gym.make("agentgym/MemoryRecall-v0", **{**kwargs, "memory": False})
    obs, _ = env.reset(seed=3)
    done = False
    while not done:
        obs, reward, term, trunc, info = env.step(env.unwrapped.oracle_action(obs))
        done = term or trunc
    b = info["reward_breakdown"]
    assert reward == 1.0 and sorted(b["parts"]) == sorted(b["expected"])
    for locker, part in b["parts"].items():  # the part that showed it says so
        assert f"locker {locker}: {b['expected'][locker]}" in env.unwrapped._part_text(part - 1)
    env.close()

    def ep(parts: dict, right: set) -> SimpleNamespace:
        expected = {k: "1234" for k in parts}
        answers = {k: ("1234" if k in right else "9999") for k in parts}
        return SimpleNamespace(
            reward_breakdown={"parts": parts, "expected": expected, "answers": answers}
        )

    episodes = [ep({"1": 1, "2": 3}, {"1"}), ep({"3": 1, "4": 4}, {"3", "4"})]
    assert recall_by_part(episodes) == [1.0, None, 0.0, 1.0]
    assert recall_by_part([]) == []
    rows = {
        "summary-dapo": {
            **dict.fromkeys(("working_context", "reward_step_std", "wall_s_per_step"), 1.0),
            **dict.fromkeys(("start_sampled", "final_sampled", "start_greedy"), 0.1),
            "final_greedy": 0.2,
            "collapses": 0,
            "generated_tokens_per_step": 1.0,
            "trained_tokens_per_step": 1.0,
            "start_greedy_by_part": [0.8, 0.0, None],
            "final_greedy_by_part": [0.9, 0.25, None],
        }
    }
    assert "| summary-dapo | 80% / 0% / - -> 90% / 25% / - |" in table(rows, 40)
