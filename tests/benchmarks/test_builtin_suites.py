"""The built-in suites on their real environments: task coverage, oracle vs weak policies."""

from __future__ import annotations

import gymnasium as gym
import pytest

from agentgym.benchmarks.baselines import sympy_solver
from agentgym.benchmarks.leaderboard import collect_results, group_results
from agentgym.benchmarks.runner import run_suite
from agentgym.benchmarks.suites import Suite, SuiteEntry, get_suite
from agentgym.types import Message

BASE = "scripted:agentgym.benchmarks.baselines:"


def task_ids(env_id: str, seeds, **kwargs) -> list[str]:
    env = gym.make(env_id, **kwargs)
    try:
        return [env.reset(seed=s)[1]["task_id"] for s in seeds]
    finally:
        env.close()


def test_math_hard_entry_plays_every_hard_problem_once():
    suite = get_suite("math-balanced")
    hard = next(e for e in suite.entries if e.name == "hard")
    ids = task_ids(hard.env_id, hard.seeds, **hard.env_kwargs)
    assert len(set(ids)) == len(ids) == 44
    # no seed below the largest one reaches a problem outside the list
    more = task_ids(hard.env_id, range(max(hard.seeds) + 1), **hard.env_kwargs)
    assert set(more) == set(ids)


def test_math_level_entries_generate_problems_of_their_level():
    suite = get_suite("math-balanced")
    for entry in suite.entries[:-1]:
        ids = task_ids(entry.env_id, entry.seeds[:5], **entry.env_kwargs)
        level = entry.env_kwargs["levels"]
        assert all(i.split("/")[2] == str(level) for i in ids), ids


def test_math_balanced_ranks_oracle_then_padded_oracle_then_guessing(tmp_path):
    # a quick run (first task of each entry, all 4 samples): partial results, ranked anyway
    suite = get_suite("math-balanced")
    specs = ["oracle", BASE + "guess_zero", BASE + "padded_oracle"]
    res = {s: run_suite(suite, s, out=tmp_path, limit=1, concurrency=4) for s in specs}
    for r in res.values():
        assert r["episodes"] == 4 * 1 * 4 and not r["complete"]
    oracle, padded = res["oracle"]["metrics"], res[BASE + "padded_oracle"]["metrics"]
    assert oracle["accuracy"]["value"] == 1.0 and oracle["balanced"]["value"] == 1.0
    # same accuracy, ~50x the tokens: the balanced score must tell them apart
    assert padded["accuracy"]["value"] == 1.0
    assert 0.0 < padded["balanced"]["value"] < 0.6
    assert padded["mean_tokens"]["value"] > 20 * oracle["mean_tokens"]["value"]
    zero = res[BASE + "guess_zero"]["metrics"]
    assert zero["balanced"]["value"] < padded["balanced"]["value"]

    (group,) = group_results(collect_results(tmp_path, include_partial=True))
    order = [r["policy"]["spec"] for r in group["results"]]
    assert order == ["oracle", BASE + "padded_oracle", BASE + "guess_zero"]


def test_sympy_solver_answers_what_it_parses_and_guesses_the_rest():
    def ask(q: str) -> str:
        return sympy_solver([Message("user", q + "\n\nPut your final answer in \\boxed{}.")])

    assert ask("Simplify (x^2 - 14x + 48)/(x - 6).") == "\\boxed{x - 8}"
    assert ask("Solve for x: 5(x + 7) = 7(x + 2) + 5.") == "\\boxed{8}"
    assert ask("Expand (x + 3)(x + 2). Write the result as a polynomial.") == (
        "\\boxed{x^{2} + 5 x + 6}"
    )
    assert ask("A train leaves at noon ...") == "\\boxed{0}"
    assert ask("Simplify ((((.") == "\\boxed{0}"


def test_appgen_suite_seeds_cover_every_task_once():
    suite = get_suite("appgen")
    (entry,) = suite.entries
    ids = task_ids(entry.env_id, [*entry.seeds, len(entry.seeds)])
    names = [i.split("@")[0] for i in ids]
    assert len(set(names[:-1])) == len(entry.seeds)
    assert names[-1] == names[0]  # seed n wraps around: there is no task the suite misses


@pytest.mark.slow
def test_appgen_oracle_passes_all_tests(tmp_path):
    suite = Suite(
        name="appgen-one",
        version=1,
        entries=(SuiteEntry("tasks", "agentgym/AppGen-v0", (1,)),),
        metrics=("pass_rate", "test_fraction", "mean_tokens"),
        primary_metric="pass_rate",
        plot_metric="pass_rate",
        success="all_tests",
    )
    r = run_suite(suite, "oracle", out=tmp_path)
    assert r["complete"]
    assert r["metrics"]["pass_rate"]["value"] == 1.0
    assert r["metrics"]["test_fraction"]["value"] == 1.0
