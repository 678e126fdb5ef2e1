"""Number and polynomial text, and the small draws, shared by every problem family.

Each family module turns ``(rng, level)`` into a :data:`Draft`; the helpers here write
the numbers of a statement or a worked step the same way in every family (``5/4`` in
text, ``\\frac{5}{4}`` in a gold answer, ``(-3)`` as an operand).
"""

from __future__ import annotations

import random

import sympy

__all__ = [
    "NAMES",
    "Draft",
    "R",
    "X",
    "lin",
    "nonzero",
    "num",
    "par",
    "poly",
    "signed",
    "solve_one",
    "tex",
]

R = sympy.Rational
X = sympy.Symbol("x")

#: People in word problems.
NAMES = ("Ana", "Ben", "Chen", "Dina", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jia", "Kai", "Lea")

#: What a family returns: problem text, exact answer (sympy value or LaTeX text), and
#: the concise and verbose solution steps (without the final-answer statement).
Draft = tuple[str, sympy.Basic | str, list[str], list[str]]


def num(q: sympy.Rational | int) -> str:
    """Plain text for a rational: ``7``, ``-3``, ``5/4``."""
    q = R(q)
    return str(q.p) if q.q == 1 else f"{q.p}/{q.q}"


def tex(q: sympy.Rational | int) -> str:
    """LaTeX for a rational answer: ``7``, ``-\\frac{5}{4}``."""
    q = R(q)
    if q.q == 1:
        return str(q.p)
    sign = "-" if q < 0 else ""
    return f"{sign}\\frac{{{abs(q.p)}}}{{{q.q}}}"


def par(q: sympy.Rational | int) -> str:
    """A number as an operand: negative numbers and fractions in parentheses."""
    s = num(q)
    return f"({s})" if (R(q) < 0 or "/" in s) else s


def poly(expr: sympy.Expr) -> str:
    """A polynomial in x as plain text: ``x^2 + 5x - 6``."""
    p = sympy.Poly(sympy.expand(expr), X)
    terms = []
    for (deg,), coeff in zip(p.monoms(), p.coeffs(), strict=True):
        c = R(coeff)
        mag = abs(c)
        if deg == 0:
            body = num(mag)
        else:
            var = "x" if deg == 1 else f"x^{deg}"
            body = var if mag == 1 else f"{num(mag)}{var}"
        terms.append(("-" if c < 0 else "+", body))
    if not terms:
        return "0"
    first_sign, first = terms[0]
    out = ("-" if first_sign == "-" else "") + first
    for sign, body in terms[1:]:
        out += f" {sign} {body}"
    return out


def signed(c: int, var: str = "") -> str:
    """`` + 3x`` / `` - 3x`` for a term after the first."""
    mag = abs(c)
    coef = "" if (mag == 1 and var) else str(mag)
    return f" {'-' if c < 0 else '+'} {coef}{var}"


def lin(a: int, b: int) -> str:
    """``ax + b`` as text."""
    first = "x" if a == 1 else "-x" if a == -1 else f"{a}x"
    return first + (signed(b) if b else "")


def nonzero(rng: random.Random, lo: int, hi: int) -> int:
    """A draw from ``lo..hi`` (inclusive) other than zero."""
    while True:
        v = rng.randint(lo, hi)
        if v != 0:
            return v


def solve_one(lhs: sympy.Expr, rhs: sympy.Expr) -> sympy.Rational:
    """The one solution in x of ``lhs = rhs`` (a linear equation), exactly."""
    (sol,) = sympy.solve(sympy.Eq(lhs, rhs), X)
    return R(sol)
