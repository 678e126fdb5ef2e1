"""Linear equations in x: ax + b = c up to a(x + b) = c(x - d) + e.

See the table of kinds and levels in :mod:`agentgym.envs.math.generator`.
"""

from __future__ import annotations

import random

from agentgym.envs.math.generator.common import Draft, X, lin, nonzero, num, par, signed, solve_one

__all__ = ["linear"]


def linear(rng: random.Random, level: int) -> Draft:
    """The ``linear`` kind at ``level`` 1-3 (a Draft), every number drawn from ``rng``."""
    if level == 1:
        a, x0 = nonzero(rng, 2, 9), rng.randint(-10, 12)
        b = nonzero(rng, -20, 20)
        c = a * x0 + b
        r = solve_one(a * X + b, c)
        eq = f"{lin(a, b)} = {c}"
        concise = [f"{a}x = {c} - {par(b)} = {c - b}, so x = {c - b}/{a} = {num(r)}."]
        verbose = [
            f"We solve {eq} for x.",
            f"Move the constant to the right: {a}x = {c} - {par(b)} = {c - b}.",
            f"Divide both sides by {a}: x = {c - b}/{a} = {num(r)}.",
            f"Check: {a} * {par(r)} + {par(b)} = {c}, correct.",
        ]
        return f"Solve for x: {eq}.", r, concise, verbose
    if level == 2:
        a, c = rng.randint(2, 12), rng.randint(1, 11)
        while a == c:
            c = rng.randint(1, 11)
        x0 = rng.randint(-9, 9)
        b = rng.randint(-15, 15)
        d = a * x0 + b - c * x0
        r = solve_one(a * X + b, c * X + d)
        eq = f"{lin(a, b)} = {lin(c, d)}"
        concise = [f"Subtract {c}x and {par(b)}: {a - c}x = {d - b}, so x = {num(r)}."]
        verbose = [
            f"We solve {eq} for x.",
            f"Subtract {c}x from both sides: {lin(a - c, b)} = {d}.",
            f"Subtract {par(b)} from both sides: {a - c}x = {d - b}.",
            f"Divide by {a - c}: x = {num(r)}.",
            f"Check: both sides equal {a * r + b} at x = {num(r)}, correct.",
        ]
        return f"Solve for x: {eq}.", r, concise, verbose
    a, c = rng.randint(2, 9), rng.randint(1, 8)
    while a == c:
        c = rng.randint(1, 8)
    b, d, e = rng.randint(-9, 9), rng.randint(-9, 9), rng.randint(-12, 12)
    r = solve_one(a * (X + b), c * (X - d) + e)
    eq = f"{a}(x{signed(b) if b else ''}) = {c}(x{signed(-d) if d else ''}){signed(e) if e else ''}"
    left, right = lin(a, a * b), lin(c, -c * d + e)
    concise = [f"{left} = {right}; {a - c}x = {-c * d + e - a * b}; x = {num(r)}."]
    verbose = [
        f"We solve {eq} for x.",
        f"Expand both sides: {left} = {right}.",
        f"Collect x on the left and numbers on the right: {a - c}x = {-c * d + e - a * b}.",
        f"Divide by {a - c}: x = {num(r)}.",
        f"Check: both sides equal {num(a * (r + b))} at x = {num(r)}, correct.",
    ]
    return f"Solve for x: {eq}.", r, concise, verbose
