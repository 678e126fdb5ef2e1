"""Systems of two linear equations in x and y, solved by elimination.

See the table of kinds and levels in :mod:`agentgym.envs.math.generator`.
"""

from __future__ import annotations

import random

import sympy

from agentgym.envs.math.generator.common import Draft, nonzero, par, signed

__all__ = ["systems"]


def systems(rng: random.Random, level: int) -> Draft:
    """The ``systems`` kind at ``level`` 1-3 (a Draft), every number drawn from ``rng``."""
    x0, y0 = rng.randint(-9, 9), rng.randint(-9, 9)
    ask = "Solve the system {eqs}. Give your answer as an ordered pair (x, y)."
    if level == 1:
        s, d = x0 + y0, x0 - y0
        eqs = f"x + y = {s} and x - y = {d}"
        xs, ys = sympy.symbols("x y")
        (sol,) = sympy.linsolve([xs + ys - s, xs - ys - d], xs, ys)
        ans = f"({sol[0]}, {sol[1]})"
        concise = [f"Adding: 2x = {s + d}, x = {x0}; y = {s} - {par(x0)} = {y0}."]
        verbose = [
            f"We solve x + y = {s} and x - y = {d}.",
            f"Adding the two equations removes y: 2x = {s} + {par(d)} = {s + d}.",
            f"So x = {s + d}/2 = {x0}.",
            f"Substituting into the first equation: y = {s} - {par(x0)} = {y0}.",
            f"Check: {x0} - {par(y0)} = {d}, correct.",
        ]
        return ask.format(eqs=eqs), ans, concise, verbose
    hi = 5 if level == 2 else 12
    while True:
        a1, b1, a2, b2 = (nonzero(rng, -hi, hi) for _ in range(4))
        det = a1 * b2 - a2 * b1
        if det != 0 and a1 > 0 and a2 > 0:
            break
    c1, c2 = a1 * x0 + b1 * y0, a2 * x0 + b2 * y0
    xs, ys = sympy.symbols("x y")
    (sol,) = sympy.linsolve([a1 * xs + b1 * ys - c1, a2 * xs + b2 * ys - c2], xs, ys)
    e1 = f"{a1}x{signed(b1, 'y')} = {c1}"
    e2 = f"{a2}x{signed(b2, 'y')} = {c2}"
    ans = f"({sol[0]}, {sol[1]})"
    # eliminate x: a2*(eq1) - a1*(eq2)
    ky, kc = a2 * b1 - a1 * b2, a2 * c1 - a1 * c2
    concise = [
        f"{a2}*(1) - {a1}*(2): {ky}y = {kc}, y = {y0}; then {a1}x = {c1 - b1 * y0}, x = {x0}."
    ]
    verbose = [
        f"We solve {e1} (1) and {e2} (2) by elimination.",
        f"Multiply (1) by {a2} and (2) by {a1} so that x has the same coefficient.",
        f"Subtracting removes x: {ky}y = {kc}, so y = {y0}.",
        f"Substitute y = {y0} into (1): {a1}x = {c1} - {par(b1 * y0)} = {c1 - b1 * y0}, so x = {x0}.",
        f"Check in (2): {a2} * {par(x0)} + {par(b2)} * {par(y0)} = {c2}, correct.",
    ]
    return ask.format(eqs=f"{e1} and {e2}"), ans, concise, verbose
