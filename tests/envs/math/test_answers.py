"""Extraction, normalisation and the in-process fast path."""

from __future__ import annotations

from fractions import Fraction

import pytest

from agentgym.envs.math.extract import extract_answer, find_boxed, remove_boxes, strip_boxed
from agentgym.envs.math.fastcheck import Inf, Num, Seq, fast_compare, parse_choice, parse_value
from agentgym.envs.math.normalize import (
    align_assignments,
    normalize,
    split_top_level,
    top_level_equals,
)


# ----------------------------------------------------------------------------- extract
def test_find_boxed_handles_nesting_escapes_and_truncation():
    text = r"a \boxed{\frac{1}{2}} b \boxed{\{1, 2\}} c \fbox{7} d \boxed{\boxed{3}} e \boxed{9"
    assert find_boxed(text) == [r"\frac{1}{2}", r"\{1, 2\}", "7", r"\boxed{3}"]
    assert find_boxed("no boxes") == []
    assert find_boxed(r"\boxed 42 is it") == ["42"]
    assert find_boxed(r"\boxedx{3}") == []


def test_strip_and_remove_boxes():
    assert strip_boxed(r"$\boxed{\boxed{5}}$") == "5"
    assert strip_boxed(r"\boxed{5} and more") == r"\boxed{5} and more"
    assert remove_boxes(r"so \boxed{x = \frac{1}{2}} holds") == r"so x = \frac{1}{2} holds"


@pytest.mark.parametrize(
    ("text", "answer", "fmt"),
    [
        ("work\nThe answer is \\boxed{12}.", "12", "boxed"),
        ("work\nAnswer: 12", "12", "answer_line"),
        ("work\n**Final Answer:** $12$.", "12", "answer_line"),
        ("work\nanswer：12", "12", "answer_line"),
        ("Thus the final answer is 3.25. Done.", "3.25", "phrase"),
        ("The answer is $x = \\frac{1}{2}$ since ...", "x = \\frac{1}{2}", "phrase"),
        ("The answer is: \\boxed{4}", "4", "boxed"),
    ],
)
def test_extract_answer_formats(text: str, answer: str, fmt: str):
    ex = extract_answer(text)
    assert (ex.answer, ex.format, ex.reason) == (answer, fmt, None)


def test_extract_answer_reports_missing_and_empty():
    assert extract_answer("just text").reason == "no_answer"
    assert extract_answer("").answer is None
    empty = extract_answer("\\boxed{} ok")
    assert (empty.answer, empty.reason, empty.format) == (None, "empty_answer", "boxed")


def test_extract_answer_collects_distinct_statements():
    ex = extract_answer("\\boxed{3} hmm \\boxed{ 3 } then \\boxed{4}\nAnswer: 4")
    assert ex.answer == "4"
    assert ex.candidates == ("4", "3")


def test_box_wins_over_answer_line_as_the_answer():
    ex = extract_answer("Answer: 5\n\\boxed{6}")
    assert ex.answer == "6" and ex.format == "boxed"
    assert set(ex.candidates) == {"5", "6"}
    assert ex.formats == ("boxed", "answer_line")


# ----------------------------------------------------------------------------- normalize
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("$\\boxed{ 12 }$.", "12"),
        ("\\dfrac{3}{4}", "\\frac{3}{4}"),
        ("\\frac12", "\\frac{1}{2}"),
        ("1,234,567", "1234567"),
        ("1{,}000", "1000"),
        ("1\\,000", "1000"),
        ("1 000", "1000"),
        ("30^{\\circ}", "30"),
        ("45°", "45"),
        ("\\$5", "5"),
        ("5 \\text{ cm}", "5"),
        ("12 apples", "12"),
        ("20 square meters", "20"),
        ("n + m", "n+m"),
        ("2 m", "2"),
        ("50%", "50\\%"),
        ("50 percent", "50\\%"),
        ("x = 3", "3"),
        ("a_1 = 7", "7"),
        ("\\theta = \\frac{\\pi}{2}", "\\frac{\\pi}{2}"),
        ("x = 2 \\text{ or } x = 3", "2,3"),
        ("x = 2, y = 3", "x=2,y=3"),
        ("x^2 + y^2 = 1", "x^2+y^2=1"),
        ("x \\in [0, 1]", "[0,1]"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
        ("((7))", "7"),
        ("(1)(2)", "(1)(2)"),
        ("\\pi r^2", "\\pi r^2"),
        ("x^{2} + a_{1}", "x^2+a_1"),
        ("2^{10}", "2^{10}"),
        ("\\frac{\\sqrt3}{2}", "\\frac{\\sqrt{3}}{2}"),
        ("\\text{(B)}", "B"),
        ("+5", "5"),
        ("\u22125", "-5"),
        (
            "\\begin{bmatrix}1 & 2\\\\3 & 4\\end{bmatrix}",
            "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}",
        ),
    ],
)
def test_normalize(raw: str, expected: str):
    assert normalize(raw) == expected


def test_align_assignments_orders_named_values_for_a_tuple_gold():
    assert align_assignments("(1,2)", "y=2,x=1") == "(1,2)"
    assert align_assignments("(1,2)", "x=1,x=2") == "x=1,x=2"  # same name twice
    assert align_assignments("\\{1,2\\}", "y=2,x=1") == "y=2,x=1"  # gold is not a tuple
    assert align_assignments("(1,2)", "1+1=2,x=1") == "1+1=2,x=1"  # not a name


def test_split_helpers_respect_brackets():
    assert split_top_level("(1,2),[3,4),\\{5,6\\},7") == ["(1,2)", "[3,4)", "\\{5,6\\}", "7"]
    assert top_level_equals("x=f(a=1)") == ["x", "f(a=1)"]
    assert top_level_equals("a<=b") == ["a<=b"]
    assert top_level_equals("a==b") == ["a==b"]


# ----------------------------------------------------------------------------- fast path
def test_parse_value_kinds():
    assert parse_value("-3") == Num(Fraction(-3))
    assert parse_value("2.50") == Num(Fraction(5, 2), decimals=2)
    assert parse_value("\\frac{-3}{4}") == Num(Fraction(-3, 4))
    assert parse_value("1\\frac{1}{3}") == Num(Fraction(4, 3))
    assert parse_value("12\\%") == Num(Fraction(12), percent=True)
    assert parse_value("-\\infty") == Inf(-1)
    assert parse_value("[1,\\infty)") == Seq("bracket", "[", ")", (Num(Fraction(1)), Inf(1)))
    assert parse_value("\\{1,2\\}") == Seq("set", "{", "}", (Num(Fraction(1)), Num(Fraction(2))))
    assert parse_value("1,2").kind == "list"
    assert parse_value("(5)") == Num(Fraction(5))
    for opaque in ("\\sqrt{2}", "x+1", "1/0", "9" * 200, "(1,x)", ""):
        assert parse_value(opaque) is None


def test_parse_choice():
    assert parse_choice("(C)", gold=True) == "C"
    assert parse_choice("c", gold=True) is None  # a lower-case gold may be a variable
    assert parse_choice("c", gold=False) == "C"
    assert parse_choice("C)12", gold=False) == "C"
    assert parse_choice("(B),(C)", gold=False) is None


@pytest.mark.parametrize(
    ("gold", "pred", "verdict", "method"),
    [
        ("3", "3", True, "string"),
        ("\\frac{1}{2}", "0.5", True, "numeric"),
        ("\\frac{1}{3}", "0.33333", True, "numeric"),
        ("\\frac{1}{3}", "0.333", False, "numeric"),
        ("3", "2.9999", False, "numeric"),
        ("50", "50\\%", True, "numeric"),
        ("0.5", "50\\%", True, "numeric"),
        ("\\{1,2\\}", "2,1", True, "structure"),
        ("(1,2)", "(2,1)", False, "structure"),
        ("[1,2)", "[1,2]", False, "structure"),
        ("3", "3,4", False, "structure"),
        ("\\{3\\}", "3", None, "symbolic"),
        ("\\sqrt{2}", "1.4142", None, "symbolic"),
        ("3", "4=3", False, "not_a_value"),
        ("B", "(B)", True, "choice"),
        ("B", "42", False, "choice"),
        ("3", "", False, "empty"),
    ],
)
def test_fast_compare(gold: str, pred: str, verdict: bool | None, method: str):
    assert fast_compare(gold, pred) == (verdict, method)
