"""Simplification: combining like terms, expanding products, cancelling a factor.

See the table of kinds and levels in :mod:`agentgym.envs.math.generator`.
"""

from __future__ import annotations

import random

import sympy

from agentgym.envs.math.generator.common import Draft, X, lin, nonzero, par, poly, signed

__all__ = ["simplify"]


def simplify(rng: random.Random, level: int) -> Draft:
    """The ``simplify`` kind at ``level`` 1-3 (a Draft), every number drawn from ``rng``."""
    if level == 1:
        a, c = nonzero(rng, -9, 9), nonzero(rng, -9, 9)
        b, d = nonzero(rng, -12, 12), nonzero(rng, -12, 12)
        while a + c == 0:
            c = nonzero(rng, -9, 9)
        text = f"{lin(a, b)}{signed(c, 'x')}{signed(d)}"
        res = sympy.expand(a * X + b + c * X + d)
        concise = [f"{a} + {par(c)} = {a + c} for x, {b} + {par(d)} = {b + d}: {poly(res)}."]
        verbose = [
            f"We simplify {text} by combining like terms.",
            f"The x terms: {a}x and {c}x give ({a} + {par(c)})x = {a + c}x.",
            f"The constants: {b} and {d} give {b} + {par(d)} = {b + d}.",
            f"Together: {poly(res)}.",
            f"Check at x = 1: {a + b + c + d} both ways, correct.",
        ]
        return f"Simplify {text}.", poly(res), concise, verbose
    if level == 2:
        a, b = nonzero(rng, -9, 9), nonzero(rng, -9, 9)
        text = f"(x{signed(a)})(x{signed(b)})"
        res = sympy.expand((X + a) * (X + b))
        concise = [f"x^2 + ({a} + {par(b)})x + {a} * {par(b)} = {poly(res)}."]
        verbose = [
            f"We expand {text}.",
            f"Multiply each term of the first factor by each term of the second: x * x = x^2, "
            f"x * {par(b)} + {par(a)} * x = {a + b}x, and {a} * {par(b)} = {a * b}.",
            f"Adding them: {poly(res)}.",
            f"Check at x = 1: {(1 + a) * (1 + b)} both ways, correct.",
        ]
        return f"Expand {text}. Write the result as a polynomial.", poly(res), concise, verbose
    a = nonzero(rng, -9, 9)
    b = nonzero(rng, -9, 9)
    while b == a:
        b = nonzero(rng, -9, 9)
    numerator = sympy.expand((X + a) * (X + b))
    res = sympy.cancel(numerator / (X + a))
    text = f"({poly(numerator)})/(x{signed(a)})"
    concise = [f"{poly(numerator)} = (x{signed(a)})(x{signed(b)}); cancel: {poly(res)}."]
    verbose = [
        f"We simplify {text}, for x not equal to {-a}.",
        f"Factor the numerator: two numbers with product {a * b} and sum {a + b} are {a} and {b}.",
        f"So {poly(numerator)} = (x{signed(a)})(x{signed(b)}).",
        f"Cancel the common factor x{signed(a)}: the result is {poly(res)}.",
    ]
    return f"Simplify {text}.", poly(res), concise, verbose
