"""Percentage problems: p% of n, price changes, successive changes, x as % of y.

See the table of kinds and levels in :mod:`agentgym.envs.math.generator`.
"""

from __future__ import annotations

import random

from agentgym.envs.math.generator.common import Draft, R, num

__all__ = ["percentages"]


def percentages(rng: random.Random, level: int) -> Draft:
    """The ``percentages`` kind at ``level`` 1-3 (a Draft), every number drawn from ``rng``."""
    if level == 1:
        p = rng.choice((5, 10, 15, 20, 25, 30, 40, 50, 60, 75))
        n = rng.randint(2, 40) * 20
        r = R(p, 100) * n
        concise = [f"{p}% of {n} = {p}/100 * {n} = {r}."]
        verbose = [
            f"We need {p} percent of {n}.",
            f"A percent is a fraction of 100, so {p}% = {p}/100.",
            f"Multiply: {p}/100 * {n} = {p * n}/100 = {r}.",
            f"Check: {r} / {n} = {num(R(r, n))} = {p}/100, correct.",
            f"So {p}% of {n} is {r}.",
        ]
        return f"What is {p}% of {n}?", r, concise, verbose
    if level == 2:
        p = rng.choice((5, 10, 15, 20, 25, 30, 40, 50))
        n = rng.randint(2, 30) * 20
        up = rng.random() < 0.5
        factor = 1 + R(p, 100) if up else 1 - R(p, 100)
        r = n * factor
        change = R(p, 100) * n
        verb = "increased" if up else "decreased"
        op = "+" if up else "-"
        concise = [f"{p}% of {n} is {change}; {n} {op} {change} = {num(r)}."]
        verbose = [
            f"A price of {n} dollars is {verb} by {p}%.",
            f"First find {p}% of {n}: {p}/100 * {n} = {change}.",
            f"The price is {verb}, so {n} {op} {change} = {num(r)}.",
            f"Check: {n} * {num(factor)} = {num(r)}, correct.",
            f"So the new price is {num(r)} dollars.",
        ]
        return (
            f"A price of {n} dollars is {verb} by {p}%. What is the new price in dollars?",
            r,
            concise,
            verbose,
        )
    if rng.random() < 0.5:
        p = rng.choice((10, 20, 25, 50))
        q = rng.choice((10, 20, 25, 50))
        n = rng.randint(1, 10) * 100
        mid = n * (1 + R(p, 100))
        r = mid * (1 - R(q, 100))
        concise = [
            f"{n} * {num(1 + R(p, 100))} = {num(mid)}; {num(mid)} * {num(1 - R(q, 100))} = {num(r)}."
        ]
        verbose = [
            f"The value {n} goes up by {p}% and then down by {q}%.",
            f"Going up by {p}% multiplies by 1 + {p}/100 = {num(1 + R(p, 100))}: {n} * {num(1 + R(p, 100))} = {num(mid)}.",
            f"Going down by {q}% multiplies by 1 - {q}/100 = {num(1 - R(q, 100))}: {num(mid)} * {num(1 - R(q, 100))} = {num(r)}.",
            f"Check: {n} * {num((1 + R(p, 100)) * (1 - R(q, 100)))} = {num(r)}, correct.",
        ]
        return (
            f"A number {n} is increased by {p}%, and the result is then decreased by {q}%. "
            "What is the final number?",
            r,
            concise,
            verbose,
        )
    y = rng.choice((20, 25, 40, 50, 80, 125, 200, 250))
    x = rng.randint(1, 3 * y // 5) if y < 100 else rng.randint(1, y)
    r = R(100 * x, y)
    concise = [f"{x}/{y} * 100 = {100 * x}/{y} = {num(r)}."]
    verbose = [
        f"We want {x} as a percentage of {y}.",
        f"First write the fraction {x}/{y}.",
        f"Multiply by 100 to get percent: {x}/{y} * 100 = {100 * x}/{y} = {num(r)}.",
        f"Check: {num(r)}% of {y} is {num(r)}/100 * {y} = {x}, correct.",
    ]
    return (
        f"What percent of {y} is {x}? Give the number of percent.",
        r,
        concise,
        verbose,
    )
