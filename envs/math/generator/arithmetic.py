"""Arithmetic problems: sums, differences and products, then order of operations.

See the table of kinds and levels in :mod:`agentgym.envs.math.generator`.
"""

from __future__ import annotations

import random

import sympy

from agentgym.envs.math.generator.common import Draft

__all__ = ["arithmetic"]


def arithmetic(rng: random.Random, level: int) -> Draft:
    """The ``arithmetic`` kind at ``level`` 1-3 (a Draft), every number drawn from ``rng``."""
    if level == 1:
        op = rng.choice("+-*")
        a, b = (
            (rng.randint(11, 99), rng.randint(11, 99))
            if op != "*"
            else (rng.randint(3, 19), rng.randint(3, 12))
        )
        expr = f"{a} {op} {b}"
        # an exact integer, as sympify(expr) gives, without parsing a string (~5 ms a call);
        # the text is written from the int (sympy prints an Integer the same, more slowly)
        r = {"+": a + b, "-": a - b, "*": a * b}[op]
        word = {"+": "add", "-": "subtract", "*": "multiply"}[op]
        check = {"+": f"{r} - {b} = {a}", "-": f"{r} + {b} = {a}", "*": f"{r} / {b} = {a}"}[op]
        concise = [f"{expr} = {r}."]
        verbose = [
            f"We need to {word} the numbers: {expr} = {r}.",
            f"Check: {check}, which is correct.",
            f"So the value of {expr} is {r}.",
        ]
        return f"Compute {expr}.", sympy.Integer(r), concise, verbose
    if level == 2:
        a, b, c = rng.randint(2, 30), rng.randint(2, 12), rng.randint(2, 12)
        if rng.random() < 0.5:
            expr, p = f"{a} + {b} * {c}", b * c
            r = sympy.Integer(a) + p
            concise = [f"{b} * {c} = {p}, then {a} + {p} = {r}."]
            verbose = [
                f"We need the value of {expr}.",
                "Multiplication comes before addition.",
                f"First, {b} * {c} = {p}.",
                f"Then {a} + {p} = {r}.",
                f"Check: {r} - {p} = {a}, correct.",
                f"So {expr} = {r}.",
            ]
        else:
            a = a + b
            expr, d = f"({a} - {b}) * {c}", a - b
            r = sympy.Integer(d) * c
            concise = [f"{a} - {b} = {d}, then {d} * {c} = {r}."]
            verbose = [
                f"We need the value of {expr}.",
                "The parentheses come first.",
                f"Inside them, {a} - {b} = {d}.",
                f"Then we multiply: {d} * {c} = {r}.",
                f"Check: {r} / {c} = {d}, correct.",
                f"So {expr} = {r}.",
            ]
        return f"Compute {expr}.", r, concise, verbose
    a, b, c = rng.randint(2, 20), rng.randint(2, 20), rng.randint(2, 9)
    e = rng.randint(2, 9)
    d = e * rng.randint(2, 12)
    expr = f"({a} + {b}) * {c} - {d} / {e}"
    s, m, q = a + b, (a + b) * c, d // e
    r = sympy.Integer(m - q)  # d is a multiple of e: sympify of the expression gives this
    concise = [f"{a} + {b} = {s}; {s} * {c} = {m}; {d} / {e} = {q}; {m} - {q} = {r}."]
    verbose = [
        f"We need the value of {expr}.",
        f"Parentheses first: {a} + {b} = {s}.",
        f"Next the multiplication: {s} * {c} = {m}.",
        f"And the division: {d} / {e} = {q}.",
        f"Finally the subtraction: {m} - {q} = {r}.",
        f"Check: {r} + {q} = {m}, correct.",
        f"So {expr} = {r}.",
    ]
    return f"Compute {expr}.", r, concise, verbose
