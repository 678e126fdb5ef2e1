import math
import os
import sys

import pytest

from apptest import subprocess

ROOT = os.getcwd()


def ev(text, calc=None):
    from calc.evaluator import Calculator

    return (calc or Calculator()).evaluate(text)


def err(text):
    from calc.errors import CalcError

    with pytest.raises(CalcError) as info:
        ev(text)
    return info.value


def test_tokenize():
    from calc.tokens import tokenize

    toks = tokenize("x1 = .5 + 3. * foo_(2)")
    assert [(t.kind, t.value, t.pos) for t in toks] == [
        ("name", "x1", 0),
        ("op", "=", 3),
        ("num", 0.5, 5),
        ("op", "+", 8),
        ("num", 3.0, 10),
        ("op", "*", 13),
        ("name", "foo_", 15),
        ("op", "(", 19),
        ("num", 2, 20),
        ("op", ")", 21),
        ("end", None, 22),
    ]
    assert isinstance(toks[8].value, int)
    assert err("1 + $").position == 4


def test_arithmetic_types():
    assert ev("7 - 2 * 3") == 1 and isinstance(ev("2*3"), int)
    assert ev("7 / 2") == 3.5 and isinstance(ev("4 / 2"), float)
    assert ev("-7 % 3") == 2
    assert ev("(1 + 2) * (3 - 5)") == -6


def test_power_rules():
    assert ev("2^3^2") == 512
    assert ev("-2^2") == -4
    assert ev("2^-1") == 0.5
    assert ev("(-2)^2") == 4 and isinstance(ev("3^2"), int)
    assert ev("--3") == 3 and ev("+-3") == -3


def test_syntax_error_positions():
    assert err("1 +").position == 3
    assert err("(1 2)").position == 3
    assert err("(1 + 2").position == 6
    assert err("2 * * 3").position == 4
    assert err("f(1,)").position == 4
    assert err("").position == 0


def test_variables_and_ans():
    from calc.evaluator import Calculator

    c = Calculator()
    assert ev("r = 2", c) == 2
    assert ev("pi * r ^ 2", c) == pytest.approx(4 * math.pi)
    assert ev("ans / pi", c) == pytest.approx(4)
    e = err("y + 1")
    assert "unknown variable 'y'" in str(e) and e.position == 0


def test_functions():
    assert ev("sqrt(16)") == 4
    assert ev("max(1, 7, 3) + min(4, -1)") == 6
    assert ev("round(2.567, 2)") == 2.57 and ev("round(2.5)") == 2
    assert ev("log(8, 2)") == pytest.approx(3)
    assert ev("abs(-3) + cos(0)") == 4
    assert "unknown function 'nope'" in str(err("1 + nope(2)"))
    assert err("1 + nope(2)").position == 4
    for bad in ("sqrt(-1)", "log(0)", "sqrt(1, 2)", "max()"):
        err(bad)


def test_division_by_zero():
    assert "division by zero" in str(err("1 / (2 - 2)"))
    assert "division by zero" in str(err("5 % 0"))


def test_format_value():
    from calc.evaluator import format_value

    assert format_value(10) == "10"
    assert format_value(0.1 + 0.2) == "0.3"
    assert format_value(2.0) == "2"
    assert format_value(1 / 3) == "0.333333333333"


def test_cli_expression():
    out = subprocess.run(
        [sys.executable, "-m", "calc", "-e", "2^10"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )
    assert out.stdout.strip() == "1024"
    out = subprocess.run(
        [sys.executable, "-m", "calc", "-e", "1/0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )
    assert out.returncode == 1 and out.stderr.startswith("error:")


def test_cli_repl():
    script = "a = 3\n\nb = a * 2\nb / 4\nq\nans + 1\n"
    out = subprocess.run(
        [sys.executable, "-m", "calc"],
        input=script,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )
    lines = out.stdout.splitlines()
    assert lines[:3] == ["3", "6", "1.5"]
    assert lines[3].startswith("error:") and "q" in lines[3]
    assert lines[4] == "2.5"
