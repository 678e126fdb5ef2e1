"""Quadratic equations: integer, rational and irrational roots.

See the table of kinds and levels in :mod:`agentgym.envs.math.generator`.
"""

from __future__ import annotations

import random

import sympy

from agentgym.envs.math.generator.common import Draft, R, X, nonzero, num, par, poly, signed, tex

__all__ = ["quadratic"]


def quadratic(rng: random.Random, level: int) -> Draft:
    """The ``quadratic`` kind at ``level`` 1-3 (a Draft), every number drawn from ``rng``."""
    ask = "Find all real solutions of {eq}. List them separated by commas."
    if level == 1:
        r1 = rng.randint(-9, 9)
        r2 = rng.randint(-9, 9)
        while r2 == r1:
            r2 = rng.randint(-9, 9)
        expr = sympy.expand((X - r1) * (X - r2))
        roots = sorted(sympy.solve(expr, X))
        eq = f"{poly(expr)} = 0"
        fac = f"(x{signed(-r1) if r1 else ''})(x{signed(-r2) if r2 else ''})"
        ans = ", ".join(tex(v) for v in roots)
        concise = [f"{poly(expr)} = {fac}, so x = {r1} or x = {r2}."]
        verbose = [
            f"We solve {eq}.",
            f"Look for two numbers with product {r1 * r2} and sum {r1 + r2}: they are {-r1} and {-r2}.",
            f"So the equation factors as {fac} = 0.",
            f"A product is zero when a factor is zero: x = {r1} or x = {r2}.",
            f"Check: {r1} + {r2} = {r1 + r2} and {r1} * {r2} = {r1 * r2}, correct.",
        ]
        return ask.format(eq=eq), ans, concise, verbose
    if level == 2:
        p1, p2 = rng.randint(2, 5), rng.randint(1, 3)
        q1, q2 = nonzero(rng, -7, 7), nonzero(rng, -7, 7)
        while R(q1, p1) == R(q2, p2):
            q2 = nonzero(rng, -7, 7)
        expr = sympy.expand((p1 * X - q1) * (p2 * X - q2))
        roots = sorted(sympy.solve(expr, X))
        eq = f"{poly(expr)} = 0"
        f1 = f"({p1}x{signed(-q1)})"
        f2 = f"({'' if p2 == 1 else p2}x{signed(-q2)})"
        ans = ", ".join(tex(v) for v in roots)
        concise = [f"{poly(expr)} = {f1}{f2}, so x = {num(R(q1, p1))} or x = {num(R(q2, p2))}."]
        verbose = [
            f"We solve {eq}.",
            f"The leading coefficient is {p1 * p2}, so try factors of the form (ax + b)(cx + d).",
            f"It factors as {f1}{f2} = 0.",
            f"Setting each factor to zero: {p1}x = {q1} gives x = {num(R(q1, p1))}, "
            f"and {p2}x = {q2} gives x = {num(R(q2, p2))}.",
            "Both values make the product zero, so both are solutions.",
        ]
        return ask.format(eq=eq), ans, concise, verbose
    while True:
        b, c = rng.randint(-6, 6) * 2, rng.randint(-9, 9)
        disc = b * b - 4 * c
        if disc > 0 and sympy.sqrt(disc).is_Rational is False:
            break
    expr = X**2 + b * X + c
    roots = sorted(sympy.solve(expr, X), key=lambda v: float(v))
    eq = f"{poly(expr)} = 0"
    h, k = -b // 2, disc // 4
    root_text = [f"{h} + sqrt({k})", f"{h} - sqrt({k})"] if h else [f"sqrt({k})", f"-sqrt({k})"]
    ans = ", ".join(sympy.latex(v) for v in roots)
    concise = [
        f"x = ({-b} ± sqrt({disc}))/2 = {h} ± sqrt({k}), so x = {root_text[0]} or x = {root_text[1]}."
    ]
    verbose = [
        f"We solve {eq} with the quadratic formula.",
        f"Here a = 1, b = {b}, c = {c}, so the discriminant is {par(b)}^2 - 4 * {par(c)} = {disc}.",
        "It is positive and not a perfect square, so there are two irrational roots.",
        f"x = ({-b} ± sqrt({disc}))/2, and sqrt({disc}) = 2 sqrt({k}), so x = {h} ± sqrt({k}).",
        f"The solutions are x = {root_text[0]} and x = {root_text[1]}.",
    ]
    return ask.format(eq=eq), ans, concise, verbose
