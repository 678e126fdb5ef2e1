"""Data loaders (JSONL, Parquet) and the bundled hard set."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sympy

from agentgym.envs.math import grade
from agentgym.envs.math.sources import hard_set_path, load_hard, load_problems
from agentgym.errors import ConfigError, DataError


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_common_public_dataset_layouts_work_out_of_the_box(tmp_path: Path):
    dapo_prompt = (
        "Solve the following math problem step by step. The last line of your response should "
        "be of the form Answer: $Answer (without quotes) where $Answer is the answer to the "
        "problem.\n\nWhat is 6 times 7?\n\nRemember to put your answer on its own line after "
        '"Answer:"'
    )
    rows = [
        {"question": "Tom has 3 apples and buys 2. How many?", "answer": "3 + 2 = 5\n#### 5"},
        {"problem": "Compute 1+1.", "solution": "Clearly $1+1=\\boxed{2}$.", "level": "Level 1"},
        {"problem": "Compute 2+2.", "answer": "4", "solution": "2+2=4"},
        {
            "prompt": [{"role": "user", "content": dapo_prompt}],
            "reward_model": {"ground_truth": "42", "style": "rule"},
        },
        {"Problem": "AIME-style?", "Answer": 123},
        {"problem": "Float answer", "expected_answer": 2.0},
        {"query": "Listed answer", "gt_answer": ["17"]},
    ]
    items = load_problems(_jsonl(tmp_path / "mixed.jsonl", rows))
    got = [(it.task_id, it.problem, it.answer) for it in items]
    assert got == [
        ("mixed/0", "Tom has 3 apples and buys 2. How many?", "5"),
        ("mixed/1", "Compute 1+1.", "2"),
        ("mixed/2", "Compute 2+2.", "4"),
        ("mixed/3", "What is 6 times 7?", "42"),
        ("mixed/4", "AIME-style?", "123"),
        ("mixed/5", "Float answer", "2"),
        ("mixed/6", "Listed answer", "17"),
    ]
    assert items[1].solution == "Clearly $1+1=\\boxed{2}$."
    assert dict(items[1].meta) == {"level": "Level 1"}


def test_numeric_answers_become_plain_decimals(tmp_path: Path):
    rows = [
        {"problem": "a", "answer": 1e-05},
        {"problem": "b", "answer": -2.5},
        {"problem": "c", "answer": 7},
    ]
    items = load_problems(_jsonl(tmp_path / "nums.jsonl", rows))
    assert [i.answer for i in items] == ["0.00001", "-2.5", "7"]
    assert grade("\\boxed{10^{-5}}", items[0].answer).correct


def test_configured_columns(tmp_path: Path):
    rows = [{"q": "What is 2^3?", "meta": {"final": "8"}, "why": "2*2*2"}]
    items = load_problems(
        _jsonl(tmp_path / "custom.jsonl", rows),
        problem_field="q",
        answer_field="meta.final",
        solution_field="why",
        name="mine",
    )
    assert (items[0].task_id, items[0].problem, items[0].answer, items[0].solution) == (
        "mine/0",
        "What is 2^3?",
        "8",
        "2*2*2",
    )


def test_parquet(tmp_path: Path):
    path = tmp_path / "set.parquet"
    pq.write_table(pa.table({"problem": ["p1", "p2"], "answer": ["1", "\\frac{1}{2}"]}), path)
    items = load_problems(path)
    assert [(i.task_id, i.answer) for i in items] == [("set/0", "1"), ("set/1", "\\frac{1}{2}")]


def test_bad_row_names_file_row_and_field(tmp_path: Path):
    path = _jsonl(
        tmp_path / "bad.jsonl", [{"problem": "ok", "answer": "1"}, {"problem": "no answer"}]
    )
    with pytest.raises(DataError) as e:
        load_problems(path)
    msg = str(e.value)
    assert str(path) in msg and "row 2" in msg and "'answer'" in msg and "answer_field" in msg

    path2 = _jsonl(tmp_path / "bad2.jsonl", [{"answer": "1", "text": "x"}])
    with pytest.raises(DataError, match=r"row 1: field 'problem'.*problem_field"):
        load_problems(path2)

    # a MATH-style solution without a box holds no final answer
    path3 = _jsonl(tmp_path / "bad3.jsonl", [{"problem": "p", "solution": "no box here"}])
    with pytest.raises(DataError, match="row 1: field 'solution'"):
        load_problems(path3)


def test_bad_parquet_row_names_the_row(tmp_path: Path):
    path = tmp_path / "holes.parquet"
    pq.write_table(pa.table({"problem": ["a", "b", "c"], "answer": ["1", None, "3"]}), path)
    with pytest.raises(DataError, match=r"holes.parquet: row 2: field 'answer'"):
        load_problems(path)


def test_malformed_files(tmp_path: Path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"problem": "a", "answer": "1"}\n{not json\n', encoding="utf-8")
    with pytest.raises(DataError, match="line 2: not valid JSON"):
        load_problems(broken)
    with pytest.raises(ConfigError, match="not found"):
        load_problems(tmp_path / "missing.jsonl")
    (tmp_path / "data.csv").write_text("problem,answer\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\.jsonl"):
        load_problems(tmp_path / "data.csv")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(DataError, match="no rows"):
        load_problems(empty)


def test_reload_after_the_file_changes(tmp_path: Path):
    path = _jsonl(tmp_path / "d.jsonl", [{"problem": "p", "answer": "1"}])
    assert load_problems(path)[0].answer == "1"
    _jsonl(path, [{"problem": "p", "answer": "22"}])
    assert load_problems(path)[0].answer == "22"


def test_hard_set_answers_are_verified():
    """Every bundled answer equals an independent sympy computation (its `check`)."""
    rows = [json.loads(line) for line in hard_set_path().read_text(encoding="utf-8").splitlines()]
    assert len(rows) >= 40
    assert len({r["id"] for r in rows}) == len(rows)
    ns = {
        "sp": sympy,
        "x": sympy.Symbol("x", real=True),
        "y": sympy.Symbol("y", real=True),
        "z": sympy.Symbol("z"),
        "k": sympy.Symbol("k", integer=True, nonnegative=True),
    }
    for row in rows:
        value = eval(row["check"], dict(ns))  # project-authored expressions
        computed = value if isinstance(value, str) else sympy.latex(value, ln_notation=True)
        assert grade(f"\\boxed{{{computed}}}", row["answer"]).correct, (row["id"], computed)
        worked = f"{row['solution']}\nThe answer is \\boxed{{{row['answer']}}}."
        assert grade(worked, row["answer"]).correct, row["id"]


def test_load_hard_uses_row_ids():
    items = load_hard()
    assert items[0].task_id == "hard/divisors-10-factorial"
    assert all(i.task_id.startswith("hard/") and i.solution for i in items)
