"""Fraction problems: sums with a common denominator, products, quotients.

See the table of kinds and levels in :mod:`agentgym.envs.math.generator`.
"""

from __future__ import annotations

import random
from math import lcm

import sympy

from agentgym.envs.math.generator.common import Draft, R, num, par

__all__ = ["fractions"]


def _fraction_sum(a: sympy.Rational, b: sympy.Rational, sub: bool) -> tuple[str, sympy.Rational]:
    """One step of adding/subtracting two fractions with their LCD, as text."""
    den = lcm(a.q, b.q)
    an, bn = a.p * den // a.q, b.p * den // b.q
    n = an - bn if sub else an + bn
    op = "-" if sub else "+"
    res = a - b if sub else a + b
    step = f"{num(a)} {op} {num(b)} = {an}/{den} {op} {bn}/{den} = {n}/{den}"
    if f"{n}/{den}" != num(res):
        step += f" = {num(res)}"
    return step, res


def fractions(rng: random.Random, level: int) -> Draft:
    """The ``fractions`` kind at ``level`` 1-3 (a Draft), every number drawn from ``rng``."""

    def frac() -> sympy.Rational:
        d = rng.randint(2, 9)
        return R(rng.randint(1, 2 * d - 1), d)

    if level == 1:
        a, b = frac(), frac()
        while a.q == b.q == 1:
            a = frac()
        step, r = _fraction_sum(a, b, sub=False)
        den = lcm(a.q, b.q)
        concise = [f"{step}."]
        verbose = [
            f"We add the fractions {num(a)} and {num(b)}.",
            f"The least common denominator of {a.q} and {b.q} is {den}.",
            f"Rewriting both with that denominator: {step}.",
            f"So the sum is {num(r)}.",
            f"Check: {num(r)} - {par(b)} = {num(r - b)}, correct.",
        ]
        return f"Compute {num(a)} + {num(b)}. Simplify your answer.", r, concise, verbose
    if level == 2:
        a, b = frac(), frac()
        if rng.random() < 0.5:
            r = a * b
            concise = [f"{num(a)} * {num(b)} = {a.p * b.p}/{a.q * b.q} = {num(r)}."]
            verbose = [
                f"We multiply {num(a)} by {num(b)}.",
                "Multiply the numerators and the denominators.",
                f"Numerators: {a.p} * {b.p} = {a.p * b.p}. Denominators: {a.q} * {b.q} = {a.q * b.q}.",
                f"That gives {a.p * b.p}/{a.q * b.q}, which simplifies to {num(r)}.",
                f"Check: {num(r)} / {par(b)} = {num(r / b)}, correct.",
            ]
            return f"Compute {num(a)} * {num(b)}. Simplify your answer.", r, concise, verbose
        r = a / b
        inv = R(b.q, b.p)
        concise = [f"{num(a)} / {num(b)} = {num(a)} * {num(inv)} = {num(r)}."]
        verbose = [
            f"We divide {num(a)} by {num(b)}.",
            "Dividing by a fraction means multiplying by its reciprocal.",
            f"The reciprocal of {num(b)} is {num(inv)}.",
            f"So {num(a)} * {num(inv)} = {a.p * inv.p}/{a.q * inv.q}, which simplifies to {num(r)}.",
            f"Check: {num(r)} * {par(b)} = {num(a)}, correct.",
        ]
        return f"Compute {num(a)} / {num(b)}. Simplify your answer.", r, concise, verbose
    a, b, c = frac(), frac(), frac()
    while c == b:
        c = frac()
    step1, s = _fraction_sum(a, b, sub=False)
    step2, r = _fraction_sum(s, c, sub=True)
    concise = [f"{step1}; {step2}."]
    verbose = [
        f"We compute {num(a)} + {num(b)} - {num(c)} from left to right.",
        f"First the sum, with a common denominator: {step1}.",
        f"Then the difference: {step2}.",
        f"So the result is {num(r)}.",
        f"Check: {num(r)} + {par(c)} = {num(s)}, correct.",
    ]
    return (
        f"Compute {num(a)} + {num(b)} - {num(c)}. Simplify your answer.",
        r,
        concise,
        verbose,
    )
