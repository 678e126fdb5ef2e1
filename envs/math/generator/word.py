"""Word problems: stickers and marbles, trains and tickets, ages and pipes.

See the table of kinds and levels in :mod:`agentgym.envs.math.generator`.
"""

from __future__ import annotations

import random

import sympy

from agentgym.envs.math.generator.common import NAMES, Draft, R, X, num, solve_one

__all__ = ["word"]


def word(rng: random.Random, level: int) -> Draft:
    """The ``word`` kind at ``level`` 1-3 (a Draft), every number drawn from ``rng``."""
    name, other = rng.sample(NAMES, 2)
    if level == 1:
        if rng.random() < 0.5:
            a, b, c = rng.randint(20, 60), rng.randint(2, 19), rng.randint(2, 30)
            r = sympy.Integer(a) - b + c
            problem = f"{name} has {a} stickers, gives {b} to {other}, then buys {c} more. How many stickers does {name} have now?"
            concise = [f"{a} - {b} = {a - b}; {a - b} + {c} = {r}."]
            verbose = [
                f"{name} starts with {a} stickers.",
                f"After giving {b} away: {a} - {b} = {a - b}.",
                f"After buying {c} more: {a - b} + {c} = {r}.",
                f"Check: {r} - {c} + {b} = {a}, correct.",
                f"So {name} has {r} stickers.",
            ]
            return problem, r, concise, verbose
        per, groups = rng.randint(3, 12), rng.randint(2, 9)
        total = per * groups
        r = sympy.Integer(total) / groups
        problem = f"{name} shares {total} marbles equally among {groups} friends. How many marbles does each friend get?"
        concise = [f"{total} marbles / {groups} friends = {r}."]
        verbose = [
            f"There are {total} marbles and {groups} friends.",
            "Sharing equally means dividing the total by the number of friends.",
            f"{total} / {groups} = {r}.",
            f"Check: {groups} * {r} = {total}, correct.",
            f"So each friend gets {r} marbles.",
        ]
        return problem, r, concise, verbose
    if level == 2:
        if rng.random() < 0.5:
            v, t, w, u = (
                rng.randint(4, 12) * 10,
                rng.randint(1, 4),
                rng.randint(4, 12) * 10,
                rng.randint(1, 4),
            )
            r = sympy.Integer(v) * t + w * u
            problem = (
                f"A train travels at {v} km/h for {t} hours, then at {w} km/h for {u} hours. "
                "How many kilometres does it travel in total?"
            )
            concise = [f"{v} * {t} + {w} * {u} = {v * t} + {w * u} = {r}."]
            verbose = [
                "Distance is speed times time, for each part of the trip.",
                f"First part: {v} km/h * {t} h = {v * t} km.",
                f"Second part: {w} km/h * {u} h = {w * u} km.",
                f"Total: {v * t} + {w * u} = {r} km.",
                f"So the train travels {r} kilometres.",
            ]
            return problem, r, concise, verbose
        p, q, a, c = rng.randint(8, 20), rng.randint(3, 9), rng.randint(1, 4), rng.randint(1, 5)
        r = sympy.Integer(p) * a + q * c
        problem = (
            f"Adult tickets cost {p} dollars and child tickets cost {q} dollars. {name} buys "
            f"{a} adult and {c} child tickets. How many dollars does {name} pay?"
        )
        concise = [f"{a} * {p} + {c} * {q} = {p * a} + {q * c} = {r}."]
        verbose = [
            f"{name} buys two kinds of tickets.",
            f"Adult tickets: {a} * {p} = {p * a} dollars.",
            f"Child tickets: {c} * {q} = {q * c} dollars.",
            f"Total: {p * a} + {q * c} = {r} dollars.",
            f"So {name} pays {r} dollars.",
        ]
        return problem, r, concise, verbose
    if rng.random() < 0.5:
        k, young, n = rng.randint(2, 5), rng.randint(3, 15), rng.randint(2, 10)
        s = k * young + young + 2 * n
        r = solve_one(k * X + X + 2 * n, s)
        problem = (
            f"{name} is {k} times as old as {other}. In {n} years, the sum of their ages will "
            f"be {s}. How old is {other} now?"
        )
        concise = [f"{k}x + x + 2 * {n} = {s}, so {k + 1}x = {s - 2 * n}, x = {r}."]
        verbose = [
            f"Let x be {other}'s age now; then {name} is {k}x.",
            f"In {n} years they will be x + {n} and {k}x + {n}.",
            f"Their sum is {k + 1}x + {2 * n} = {s}.",
            f"So {k + 1}x = {s - 2 * n} and x = {r}.",
            f"Check: {r} + {k * r} + {2 * n} = {s}, correct.",
            f"So {other} is {r} years old.",
        ]
        return problem, r, concise, verbose
    a, b = rng.sample((2, 3, 4, 5, 6, 8, 10, 12), 2)
    r = R(a * b, a + b)
    problem = (
        f"Pipe A fills a tank in {a} hours and pipe B fills it in {b} hours. How many hours "
        "do they take to fill it together?"
    )
    concise = [f"1/{a} + 1/{b} = {num(R(1, a) + R(1, b))} per hour, so {num(r)} hours."]
    verbose = [
        f"Pipe A fills 1/{a} of the tank per hour and pipe B fills 1/{b}.",
        f"Together they fill 1/{a} + 1/{b} = {a + b}/{a * b} = {num(R(1, a) + R(1, b))} of the tank per hour.",
        f"The time is the reciprocal: {num(r)} hours.",
        f"Check: {num(r)} * {num(R(1, a) + R(1, b))} = 1 tank, correct.",
    ]
    return problem, r, concise, verbose
