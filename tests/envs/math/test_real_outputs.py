"""The real-output-style table (issue 19): every case graded with its expected verdict."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from agentgym.envs.math import grade, warm_up

sys.path.insert(0, str(Path(__file__).parent))
from real_output_cases import CASES as ISSUE_CASES
from real_output_cases import REJECT_CASES, Case
from real_output_forms import FORM_CASES

CASES = ISSUE_CASES + FORM_CASES


@pytest.fixture(scope="module", autouse=True)
def _warm_pool():
    warm_up()


def _id(c: Case) -> str:
    return f"{c.category}: {c.why}"


def test_every_kind_of_the_issue_is_covered_with_right_and_wrong_cases():
    kinds = {
        "multi_box", "self_correction", "hedging", "evaluation", "polynomials", "labels",
        "gold_forms", "fractions", "thousands", "scientific", "percentages", "units",
        "intervals", "matrices", "choice", "text", "think", "anti_gaming",
    }  # fmt: skip
    right = Counter(c.category for c in CASES if c.correct)
    wrong = Counter(c.category for c in CASES if not c.correct)
    assert kinds <= set(right) and kinds <= set(wrong) | {"anti_gaming"}
    assert len(CASES) + len(REJECT_CASES) >= 150
    assert len({(c.response, c.gold) for c in CASES}) == len(CASES)  # no duplicates


def _check(case: Case, **kwargs) -> None:
    r = grade(case.response, case.gold, **kwargs)
    assert not r.infra_failure, r  # a verdict within the grader's own deadline
    assert r.correct is case.correct, f"{case.why}: {r}"
    assert (r.reason == "correct") is case.correct


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_real_output(case: Case):
    _check(case)


@pytest.mark.parametrize("case", REJECT_CASES, ids=[_id(c) for c in REJECT_CASES])
def test_real_output_with_strict_hedging(case: Case):
    _check(case, hedging="reject")


def test_hedging_reasons_and_the_final_answer_are_reported():
    hedge = grade(r"The answer is $\boxed{5}$ or $\boxed{6}$.", "5")
    assert (hedge.reason, hedge.final) == ("hedged", ("5", "6"))
    fixed = grade(r"So \boxed{14}. Hmm, I dropped a sign; the answer is \boxed{-14}.", "-14")
    assert (fixed.extracted, fixed.final, fixed.candidates) == ("-14", ("-14",), ("-14", "14"))
    strict = grade(fixed_reply := r"So \boxed{14}. Wait: \boxed{-14}.", "-14", hedging="reject")
    assert (strict.correct, strict.reason, strict.hedging) == (False, "hedged", "reject")
    assert grade(fixed_reply, "-14").correct
    combined = grade(r"\boxed{(4, 1)}, \boxed{(1, 4)}", "(1,4),(4,1)")
    assert combined.extracted == "(4, 1), (1, 4)" and combined.final == ("(4, 1)", "(1, 4)")
    with pytest.raises(ValueError, match="hedging"):
        grade(r"\boxed{1}", "1", hedging="first")


def test_the_env_grades_with_its_hedging_argument(tmp_path):
    import json

    import gymnasium as gym

    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps({"problem": "Compute 7 * (-2).", "answer": "-14"}) + "\n")
    reply = r"So \boxed{14}. Hmm, I dropped a sign; the answer is \boxed{-14}."
    rewards = {}
    for hedging in ("last", "reject"):
        env = gym.make("agentgym/BalancedMath-v0", source=str(data), hedging=hedging).unwrapped
        env.reset(seed=0)
        _, rewards[hedging], *_, info = env.step(reply)
        expected = "correct" if hedging == "last" else "hedged"
        assert info["reward_breakdown"]["grade_reason"] == expected
    assert rewards == {"last": 1.0, "reject": 0.0}
