"""Procedural maths problems with exact answers and worked solutions.

``generate(seed, level=..., kind=...)`` is a pure function of its arguments: the same
seed, level and kind give the same problem on every machine (it draws from
``random.Random(seed)``). Answers are computed exactly with sympy.

Kinds and what each level asks:

=============  ===========================  ==========================  ============================
kind           level 1                      level 2                     level 3
=============  ===========================  ==========================  ============================
arithmetic     a+b, a-b, a*b                a+b*c, (a-b)*c              (a+b)*c - d/e
fractions      a/b + c/d                    a/b * c/d, a/b / c/d        a/b + c/d - e/f
percentages    p% of n                      n increased/decreased by p% p% up then q% down; x as % of y
linear         ax + b = c                   ax + b = cx + d             a(x + b) = c(x - d) + e
quadratic      monic, integer roots         non-monic, rational roots   irrational roots (formula)
systems        x + y = s, x - y = d         2x2, integer solution       2x2, larger coefficients
simplify       combine like terms           expand (x + a)(x + b)       cancel a common factor
word           totals, sharing              speed/distance, tickets     ages, work rates
=============  ===========================  ==========================  ============================

Each problem carries two worked solutions ending in the final-answer statement: a
*concise* one (the steps, nothing else) and a *verbose* one (restates the goal, explains
each step and checks the result), 2-4 times longer. Both are short templated texts
(about 10-150 tokens) so that a tiny model can learn them; the quickstart fine-tunes on
verbose solutions and then uses a token cost to make the model concise.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass
from math import lcm

import sympy

from agentgym import ConfigError, UnknownNameError

__all__ = [
    "ANSWER_FORMATS",
    "KINDS",
    "LEVELS",
    "Problem",
    "format_answer",
    "generate",
    "parse_task_id",
]

KINDS = (
    "arithmetic",
    "fractions",
    "percentages",
    "linear",
    "quadratic",
    "systems",
    "simplify",
    "word",
)
LEVELS = (1, 2, 3)
ANSWER_FORMATS = ("boxed", "answer_line")


def format_answer(answer: str, answer_format: str = "boxed") -> str:
    """The final-answer statement in ``answer_format`` (``boxed`` or ``answer_line``)."""
    if answer_format == "boxed":
        return f"The answer is \\boxed{{{answer}}}."
    if answer_format == "answer_line":
        return f"Answer: {answer}"
    raise UnknownNameError("answer_format", answer_format, ANSWER_FORMATS)


@dataclass(frozen=True)
class Problem:
    """One generated problem.

    Attributes:
        problem: the statement shown to the model.
        answer: the exact answer, as LaTeX (gold).
        verbose_solution / concise_solution: worked solutions ending in the answer
            statement of ``answer_format``.
        kind / level / seed: what generated it (``task_id`` is ``gen/<kind>/<level>/<seed>``).
        verbose_body / concise_body: the solutions without their final statement.
        answer_format: the format the two solutions end in.
    """

    problem: str
    answer: str
    verbose_solution: str
    concise_solution: str
    kind: str
    level: int
    seed: int
    verbose_body: str
    concise_body: str
    answer_format: str = "boxed"

    @property
    def task_id(self) -> str:
        return f"gen/{self.kind}/{self.level}/{self.seed}"

    def solution(self, style: str = "concise", answer_format: str | None = None) -> str:
        """The worked solution in ``style`` (``verbose``/``concise``) ending in ``answer_format``."""
        if style not in ("verbose", "concise"):
            raise UnknownNameError("solution style", style, ("verbose", "concise"))
        body = self.verbose_body if style == "verbose" else self.concise_body
        return f"{body}\n{format_answer(self.answer, answer_format or self.answer_format)}"


# ----------------------------------------------------------------------------- helpers
R = sympy.Rational
X = sympy.Symbol("x")

_NAMES = ("Ana", "Ben", "Chen", "Dina", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jia", "Kai", "Lea")


def _num(q: sympy.Rational | int) -> str:
    """Plain text for a rational: ``7``, ``-3``, ``5/4``."""
    q = R(q)
    return str(q.p) if q.q == 1 else f"{q.p}/{q.q}"


def _tex(q: sympy.Rational | int) -> str:
    """LaTeX for a rational answer: ``7``, ``-\\frac{5}{4}``."""
    q = R(q)
    if q.q == 1:
        return str(q.p)
    sign = "-" if q < 0 else ""
    return f"{sign}\\frac{{{abs(q.p)}}}{{{q.q}}}"


def _par(q: sympy.Rational | int) -> str:
    """A number as an operand: negative numbers and fractions in parentheses."""
    s = _num(q)
    return f"({s})" if (R(q) < 0 or "/" in s) else s


def _poly(expr: sympy.Expr) -> str:
    """A polynomial in x as plain text: ``x^2 + 5x - 6``."""
    poly = sympy.Poly(sympy.expand(expr), X)
    terms = []
    for (deg,), coeff in zip(poly.monoms(), poly.coeffs(), strict=True):
        c = R(coeff)
        mag = abs(c)
        if deg == 0:
            body = _num(mag)
        else:
            var = "x" if deg == 1 else f"x^{deg}"
            body = var if mag == 1 else f"{_num(mag)}{var}"
        terms.append(("-" if c < 0 else "+", body))
    if not terms:
        return "0"
    first_sign, first = terms[0]
    out = ("-" if first_sign == "-" else "") + first
    for sign, body in terms[1:]:
        out += f" {sign} {body}"
    return out


def _signed(c: int, var: str = "") -> str:
    """`` + 3x`` / `` - 3x`` for a term after the first."""
    mag = abs(c)
    coef = "" if (mag == 1 and var) else str(mag)
    return f" {'-' if c < 0 else '+'} {coef}{var}"


def _lin(a: int, b: int) -> str:
    """``ax + b`` as text."""
    first = "x" if a == 1 else "-x" if a == -1 else f"{a}x"
    return first + (_signed(b) if b else "")


def _nonzero(rng: random.Random, lo: int, hi: int) -> int:
    while True:
        v = rng.randint(lo, hi)
        if v != 0:
            return v


Draft = tuple[str, sympy.Basic | str, list[str], list[str]]  # problem, answer, concise, verbose


# ----------------------------------------------------------------------------- kinds
def _arithmetic(rng: random.Random, level: int) -> Draft:
    if level == 1:
        op = rng.choice("+-*")
        a, b = (
            (rng.randint(11, 99), rng.randint(11, 99))
            if op != "*"
            else (rng.randint(3, 19), rng.randint(3, 12))
        )
        expr = f"{a} {op} {b}"
        r = sympy.sympify(expr)
        word = {"+": "add", "-": "subtract", "*": "multiply"}[op]
        check = {"+": f"{r} - {b} = {a}", "-": f"{r} + {b} = {a}", "*": f"{r} / {b} = {a}"}[op]
        concise = [f"{expr} = {r}."]
        verbose = [
            f"We need to {word} the numbers: {expr} = {r}.",
            f"Check: {check}, which is correct.",
            f"So the value of {expr} is {r}.",
        ]
        return f"Compute {expr}.", r, concise, verbose
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
    r = sympy.sympify(f"({a} + {b}) * {c} - {d} / {e}")
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


def _fraction_sum(a: sympy.Rational, b: sympy.Rational, sub: bool) -> tuple[str, sympy.Rational]:
    """One step of adding/subtracting two fractions with their LCD, as text."""
    den = lcm(a.q, b.q)
    an, bn = a.p * den // a.q, b.p * den // b.q
    n = an - bn if sub else an + bn
    op = "-" if sub else "+"
    res = a - b if sub else a + b
    step = f"{_num(a)} {op} {_num(b)} = {an}/{den} {op} {bn}/{den} = {n}/{den}"
    if f"{n}/{den}" != _num(res):
        step += f" = {_num(res)}"
    return step, res


def _fractions(rng: random.Random, level: int) -> Draft:
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
            f"We add the fractions {_num(a)} and {_num(b)}.",
            f"The least common denominator of {a.q} and {b.q} is {den}.",
            f"Rewriting both with that denominator: {step}.",
            f"So the sum is {_num(r)}.",
            f"Check: {_num(r)} - {_par(b)} = {_num(r - b)}, correct.",
        ]
        return f"Compute {_num(a)} + {_num(b)}. Simplify your answer.", r, concise, verbose
    if level == 2:
        a, b = frac(), frac()
        if rng.random() < 0.5:
            r = a * b
            concise = [f"{_num(a)} * {_num(b)} = {a.p * b.p}/{a.q * b.q} = {_num(r)}."]
            verbose = [
                f"We multiply {_num(a)} by {_num(b)}.",
                "Multiply the numerators and the denominators.",
                f"Numerators: {a.p} * {b.p} = {a.p * b.p}. Denominators: {a.q} * {b.q} = {a.q * b.q}.",
                f"That gives {a.p * b.p}/{a.q * b.q}, which simplifies to {_num(r)}.",
                f"Check: {_num(r)} / {_par(b)} = {_num(r / b)}, correct.",
            ]
            return f"Compute {_num(a)} * {_num(b)}. Simplify your answer.", r, concise, verbose
        r = a / b
        inv = R(b.q, b.p)
        concise = [f"{_num(a)} / {_num(b)} = {_num(a)} * {_num(inv)} = {_num(r)}."]
        verbose = [
            f"We divide {_num(a)} by {_num(b)}.",
            "Dividing by a fraction means multiplying by its reciprocal.",
            f"The reciprocal of {_num(b)} is {_num(inv)}.",
            f"So {_num(a)} * {_num(inv)} = {a.p * inv.p}/{a.q * inv.q}, which simplifies to {_num(r)}.",
            f"Check: {_num(r)} * {_par(b)} = {_num(a)}, correct.",
        ]
        return f"Compute {_num(a)} / {_num(b)}. Simplify your answer.", r, concise, verbose
    a, b, c = frac(), frac(), frac()
    while c == b:
        c = frac()
    step1, s = _fraction_sum(a, b, sub=False)
    step2, r = _fraction_sum(s, c, sub=True)
    concise = [f"{step1}; {step2}."]
    verbose = [
        f"We compute {_num(a)} + {_num(b)} - {_num(c)} from left to right.",
        f"First the sum, with a common denominator: {step1}.",
        f"Then the difference: {step2}.",
        f"So the result is {_num(r)}.",
        f"Check: {_num(r)} + {_par(c)} = {_num(s)}, correct.",
    ]
    return (
        f"Compute {_num(a)} + {_num(b)} - {_num(c)}. Simplify your answer.",
        r,
        concise,
        verbose,
    )


def _percentages(rng: random.Random, level: int) -> Draft:
    if level == 1:
        p = rng.choice((5, 10, 15, 20, 25, 30, 40, 50, 60, 75))
        n = rng.randint(2, 40) * 20
        r = R(p, 100) * n
        concise = [f"{p}% of {n} = {p}/100 * {n} = {r}."]
        verbose = [
            f"We need {p} percent of {n}.",
            f"A percent is a fraction of 100, so {p}% = {p}/100.",
            f"Multiply: {p}/100 * {n} = {p * n}/100 = {r}.",
            f"Check: {r} / {n} = {_num(R(r, n))} = {p}/100, correct.",
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
        concise = [f"{p}% of {n} is {change}; {n} {op} {change} = {_num(r)}."]
        verbose = [
            f"A price of {n} dollars is {verb} by {p}%.",
            f"First find {p}% of {n}: {p}/100 * {n} = {change}.",
            f"The price is {verb}, so {n} {op} {change} = {_num(r)}.",
            f"Check: {n} * {_num(factor)} = {_num(r)}, correct.",
            f"So the new price is {_num(r)} dollars.",
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
            f"{n} * {_num(1 + R(p, 100))} = {_num(mid)}; {_num(mid)} * {_num(1 - R(q, 100))} = {_num(r)}."
        ]
        verbose = [
            f"The value {n} goes up by {p}% and then down by {q}%.",
            f"Going up by {p}% multiplies by 1 + {p}/100 = {_num(1 + R(p, 100))}: {n} * {_num(1 + R(p, 100))} = {_num(mid)}.",
            f"Going down by {q}% multiplies by 1 - {q}/100 = {_num(1 - R(q, 100))}: {_num(mid)} * {_num(1 - R(q, 100))} = {_num(r)}.",
            f"Check: {n} * {_num((1 + R(p, 100)) * (1 - R(q, 100)))} = {_num(r)}, correct.",
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
    concise = [f"{x}/{y} * 100 = {100 * x}/{y} = {_num(r)}."]
    verbose = [
        f"We want {x} as a percentage of {y}.",
        f"First write the fraction {x}/{y}.",
        f"Multiply by 100 to get percent: {x}/{y} * 100 = {100 * x}/{y} = {_num(r)}.",
        f"Check: {_num(r)}% of {y} is {_num(r)}/100 * {y} = {x}, correct.",
    ]
    return (
        f"What percent of {y} is {x}? Give the number of percent.",
        r,
        concise,
        verbose,
    )


def _solve_one(lhs: sympy.Expr, rhs: sympy.Expr) -> sympy.Rational:
    (sol,) = sympy.solve(sympy.Eq(lhs, rhs), X)
    return R(sol)


def _linear(rng: random.Random, level: int) -> Draft:
    if level == 1:
        a, x0 = _nonzero(rng, 2, 9), rng.randint(-10, 12)
        b = _nonzero(rng, -20, 20)
        c = a * x0 + b
        r = _solve_one(a * X + b, c)
        eq = f"{_lin(a, b)} = {c}"
        concise = [f"{a}x = {c} - {_par(b)} = {c - b}, so x = {c - b}/{a} = {_num(r)}."]
        verbose = [
            f"We solve {eq} for x.",
            f"Move the constant to the right: {a}x = {c} - {_par(b)} = {c - b}.",
            f"Divide both sides by {a}: x = {c - b}/{a} = {_num(r)}.",
            f"Check: {a} * {_par(r)} + {_par(b)} = {c}, correct.",
        ]
        return f"Solve for x: {eq}.", r, concise, verbose
    if level == 2:
        a, c = rng.randint(2, 12), rng.randint(1, 11)
        while a == c:
            c = rng.randint(1, 11)
        x0 = rng.randint(-9, 9)
        b = rng.randint(-15, 15)
        d = a * x0 + b - c * x0
        r = _solve_one(a * X + b, c * X + d)
        eq = f"{_lin(a, b)} = {_lin(c, d)}"
        concise = [f"Subtract {c}x and {_par(b)}: {a - c}x = {d - b}, so x = {_num(r)}."]
        verbose = [
            f"We solve {eq} for x.",
            f"Subtract {c}x from both sides: {_lin(a - c, b)} = {d}.",
            f"Subtract {_par(b)} from both sides: {a - c}x = {d - b}.",
            f"Divide by {a - c}: x = {_num(r)}.",
            f"Check: both sides equal {a * r + b} at x = {_num(r)}, correct.",
        ]
        return f"Solve for x: {eq}.", r, concise, verbose
    a, c = rng.randint(2, 9), rng.randint(1, 8)
    while a == c:
        c = rng.randint(1, 8)
    b, d, e = rng.randint(-9, 9), rng.randint(-9, 9), rng.randint(-12, 12)
    r = _solve_one(a * (X + b), c * (X - d) + e)
    eq = f"{a}(x{_signed(b) if b else ''}) = {c}(x{_signed(-d) if d else ''}){_signed(e) if e else ''}"
    left, right = _lin(a, a * b), _lin(c, -c * d + e)
    concise = [f"{left} = {right}; {a - c}x = {-c * d + e - a * b}; x = {_num(r)}."]
    verbose = [
        f"We solve {eq} for x.",
        f"Expand both sides: {left} = {right}.",
        f"Collect x on the left and numbers on the right: {a - c}x = {-c * d + e - a * b}.",
        f"Divide by {a - c}: x = {_num(r)}.",
        f"Check: both sides equal {_num(a * (r + b))} at x = {_num(r)}, correct.",
    ]
    return f"Solve for x: {eq}.", r, concise, verbose


def _quadratic(rng: random.Random, level: int) -> Draft:
    ask = "Find all real solutions of {eq}. List them separated by commas."
    if level == 1:
        r1 = rng.randint(-9, 9)
        r2 = rng.randint(-9, 9)
        while r2 == r1:
            r2 = rng.randint(-9, 9)
        expr = sympy.expand((X - r1) * (X - r2))
        roots = sorted(sympy.solve(expr, X))
        eq = f"{_poly(expr)} = 0"
        fac = f"(x{_signed(-r1) if r1 else ''})(x{_signed(-r2) if r2 else ''})"
        ans = ", ".join(_tex(v) for v in roots)
        concise = [f"{_poly(expr)} = {fac}, so x = {r1} or x = {r2}."]
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
        q1, q2 = _nonzero(rng, -7, 7), _nonzero(rng, -7, 7)
        while R(q1, p1) == R(q2, p2):
            q2 = _nonzero(rng, -7, 7)
        expr = sympy.expand((p1 * X - q1) * (p2 * X - q2))
        roots = sorted(sympy.solve(expr, X))
        eq = f"{_poly(expr)} = 0"
        f1 = f"({p1}x{_signed(-q1)})"
        f2 = f"({'' if p2 == 1 else p2}x{_signed(-q2)})"
        ans = ", ".join(_tex(v) for v in roots)
        concise = [f"{_poly(expr)} = {f1}{f2}, so x = {_num(R(q1, p1))} or x = {_num(R(q2, p2))}."]
        verbose = [
            f"We solve {eq}.",
            f"The leading coefficient is {p1 * p2}, so try factors of the form (ax + b)(cx + d).",
            f"It factors as {f1}{f2} = 0.",
            f"Setting each factor to zero: {p1}x = {q1} gives x = {_num(R(q1, p1))}, "
            f"and {p2}x = {q2} gives x = {_num(R(q2, p2))}.",
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
    eq = f"{_poly(expr)} = 0"
    h, k = -b // 2, disc // 4
    root_text = [f"{h} + sqrt({k})", f"{h} - sqrt({k})"] if h else [f"sqrt({k})", f"-sqrt({k})"]
    ans = ", ".join(sympy.latex(v) for v in roots)
    concise = [
        f"x = ({-b} ± sqrt({disc}))/2 = {h} ± sqrt({k}), so x = {root_text[0]} or x = {root_text[1]}."
    ]
    verbose = [
        f"We solve {eq} with the quadratic formula.",
        f"Here a = 1, b = {b}, c = {c}, so the discriminant is {_par(b)}^2 - 4 * {_par(c)} = {disc}.",
        "It is positive and not a perfect square, so there are two irrational roots.",
        f"x = ({-b} ± sqrt({disc}))/2, and sqrt({disc}) = 2 sqrt({k}), so x = {h} ± sqrt({k}).",
        f"The solutions are x = {root_text[0]} and x = {root_text[1]}.",
    ]
    return ask.format(eq=eq), ans, concise, verbose


def _systems(rng: random.Random, level: int) -> Draft:
    x0, y0 = rng.randint(-9, 9), rng.randint(-9, 9)
    ask = "Solve the system {eqs}. Give your answer as an ordered pair (x, y)."
    if level == 1:
        s, d = x0 + y0, x0 - y0
        eqs = f"x + y = {s} and x - y = {d}"
        xs, ys = sympy.symbols("x y")
        (sol,) = sympy.linsolve([xs + ys - s, xs - ys - d], xs, ys)
        ans = f"({sol[0]}, {sol[1]})"
        concise = [f"Adding: 2x = {s + d}, x = {x0}; y = {s} - {_par(x0)} = {y0}."]
        verbose = [
            f"We solve x + y = {s} and x - y = {d}.",
            f"Adding the two equations removes y: 2x = {s} + {_par(d)} = {s + d}.",
            f"So x = {s + d}/2 = {x0}.",
            f"Substituting into the first equation: y = {s} - {_par(x0)} = {y0}.",
            f"Check: {x0} - {_par(y0)} = {d}, correct.",
        ]
        return ask.format(eqs=eqs), ans, concise, verbose
    hi = 5 if level == 2 else 12
    while True:
        a1, b1, a2, b2 = (_nonzero(rng, -hi, hi) for _ in range(4))
        det = a1 * b2 - a2 * b1
        if det != 0 and a1 > 0 and a2 > 0:
            break
    c1, c2 = a1 * x0 + b1 * y0, a2 * x0 + b2 * y0
    xs, ys = sympy.symbols("x y")
    (sol,) = sympy.linsolve([a1 * xs + b1 * ys - c1, a2 * xs + b2 * ys - c2], xs, ys)
    e1 = f"{a1}x{_signed(b1, 'y')} = {c1}"
    e2 = f"{a2}x{_signed(b2, 'y')} = {c2}"
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
        f"Substitute y = {y0} into (1): {a1}x = {c1} - {_par(b1 * y0)} = {c1 - b1 * y0}, so x = {x0}.",
        f"Check in (2): {a2} * {_par(x0)} + {_par(b2)} * {_par(y0)} = {c2}, correct.",
    ]
    return ask.format(eqs=f"{e1} and {e2}"), ans, concise, verbose


def _simplify(rng: random.Random, level: int) -> Draft:
    if level == 1:
        a, c = _nonzero(rng, -9, 9), _nonzero(rng, -9, 9)
        b, d = _nonzero(rng, -12, 12), _nonzero(rng, -12, 12)
        while a + c == 0:
            c = _nonzero(rng, -9, 9)
        text = f"{_lin(a, b)}{_signed(c, 'x')}{_signed(d)}"
        res = sympy.expand(a * X + b + c * X + d)
        concise = [f"{a} + {_par(c)} = {a + c} for x, {b} + {_par(d)} = {b + d}: {_poly(res)}."]
        verbose = [
            f"We simplify {text} by combining like terms.",
            f"The x terms: {a}x and {c}x give ({a} + {_par(c)})x = {a + c}x.",
            f"The constants: {b} and {d} give {b} + {_par(d)} = {b + d}.",
            f"Together: {_poly(res)}.",
            f"Check at x = 1: {a + b + c + d} both ways, correct.",
        ]
        return f"Simplify {text}.", _poly(res), concise, verbose
    if level == 2:
        a, b = _nonzero(rng, -9, 9), _nonzero(rng, -9, 9)
        text = f"(x{_signed(a)})(x{_signed(b)})"
        res = sympy.expand((X + a) * (X + b))
        concise = [f"x^2 + ({a} + {_par(b)})x + {a} * {_par(b)} = {_poly(res)}."]
        verbose = [
            f"We expand {text}.",
            f"Multiply each term of the first factor by each term of the second: x * x = x^2, "
            f"x * {_par(b)} + {_par(a)} * x = {a + b}x, and {a} * {_par(b)} = {a * b}.",
            f"Adding them: {_poly(res)}.",
            f"Check at x = 1: {(1 + a) * (1 + b)} both ways, correct.",
        ]
        return f"Expand {text}. Write the result as a polynomial.", _poly(res), concise, verbose
    a = _nonzero(rng, -9, 9)
    b = _nonzero(rng, -9, 9)
    while b == a:
        b = _nonzero(rng, -9, 9)
    num = sympy.expand((X + a) * (X + b))
    res = sympy.cancel(num / (X + a))
    text = f"({_poly(num)})/(x{_signed(a)})"
    concise = [f"{_poly(num)} = (x{_signed(a)})(x{_signed(b)}); cancel: {_poly(res)}."]
    verbose = [
        f"We simplify {text}, for x not equal to {-a}.",
        f"Factor the numerator: two numbers with product {a * b} and sum {a + b} are {a} and {b}.",
        f"So {_poly(num)} = (x{_signed(a)})(x{_signed(b)}).",
        f"Cancel the common factor x{_signed(a)}: the result is {_poly(res)}.",
    ]
    return f"Simplify {text}.", _poly(res), concise, verbose


def _word(rng: random.Random, level: int) -> Draft:
    name, other = rng.sample(_NAMES, 2)
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
        r = _solve_one(k * X + X + 2 * n, s)
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
    concise = [f"1/{a} + 1/{b} = {_num(R(1, a) + R(1, b))} per hour, so {_num(r)} hours."]
    verbose = [
        f"Pipe A fills 1/{a} of the tank per hour and pipe B fills 1/{b}.",
        f"Together they fill 1/{a} + 1/{b} = {a + b}/{a * b} = {_num(R(1, a) + R(1, b))} of the tank per hour.",
        f"The time is the reciprocal: {_num(r)} hours.",
        f"Check: {_num(r)} * {_num(R(1, a) + R(1, b))} = 1 tank, correct.",
    ]
    return problem, r, concise, verbose


_KIND_FUNCS: dict[str, Callable[[random.Random, int], Draft]] = {
    "arithmetic": _arithmetic,
    "fractions": _fractions,
    "percentages": _percentages,
    "linear": _linear,
    "quadratic": _quadratic,
    "systems": _systems,
    "simplify": _simplify,
    "word": _word,
}


#: Problems kept by :func:`generate`'s cache (a few MB at most). DAPO plays each task
#: ``G`` times, and every play resets an env on the same seed: without the cache each
#: reset would redo the sympy work (up to ~16 ms for a level-3 quadratic).
CACHE_SIZE = 4096


def generate(
    seed: int,
    level: int | None = None,
    kind: str | None = None,
    *,
    answer_format: str = "boxed",
) -> Problem:
    """The problem for ``seed`` (same arguments, same problem, on every machine).

    A pure function of its arguments, so results are cached (LRU, :data:`CACHE_SIZE`
    entries, keyed by the arguments when they are plain ``int``/``str``/``None``;
    :class:`Problem` is immutable, so callers share one object safely).

    Args:
        seed: any integer.
        level: 1, 2 or 3 (``None``: drawn from the seed).
        kind: one of :data:`KINDS` (``None``: drawn from the seed).
        answer_format: the final statement the worked solutions end in.

    Raises:
        UnknownNameError: an unknown ``kind`` or ``answer_format``.
        ConfigError: a ``level`` outside 1..3.
    """
    # exact types only: 5, 5.0, True and numpy's 5 compare equal as cache keys but
    # would put different objects in Problem.seed / Problem.level
    if (
        type(seed) is int
        and (level is None or type(level) is int)
        and (kind is None or type(kind) is str)
        and type(answer_format) is str
    ):
        return _generate_cached(seed, level, kind, answer_format)
    return _generate(seed, level, kind, answer_format)


@functools.lru_cache(maxsize=CACHE_SIZE)
def _generate_cached(seed: int, level: int | None, kind: str | None, answer_format: str) -> Problem:
    return _generate(seed, level, kind, answer_format)


def _generate(seed: int, level: int | None, kind: str | None, answer_format: str) -> Problem:
    """:func:`generate` without the cache."""
    if answer_format not in ANSWER_FORMATS:
        raise UnknownNameError("answer_format", answer_format, ANSWER_FORMATS)
    pick = random.Random(f"pick/{seed}")
    if kind is None:
        kind = pick.choice(KINDS)
    if kind not in _KIND_FUNCS:
        raise UnknownNameError("problem kind", kind, KINDS)
    if level is None:
        level = pick.choice(LEVELS)
    if level not in LEVELS:
        raise ConfigError(f"level must be one of {LEVELS}, got {level!r}.")
    rng = random.Random(f"{kind}/{level}/{seed}")
    problem, answer, concise, verbose = _KIND_FUNCS[kind](rng, level)
    gold = answer if isinstance(answer, str) else _tex(answer)
    concise_body, verbose_body = " ".join(concise), "\n".join(verbose)
    final = format_answer(gold, answer_format)
    return Problem(
        problem=problem,
        answer=gold,
        verbose_solution=f"{verbose_body}\n{final}",
        concise_solution=f"{concise_body}\n{final}",
        kind=kind,
        level=level,
        seed=seed,
        verbose_body=verbose_body,
        concise_body=concise_body,
        answer_format=answer_format,
    )


def parse_task_id(task_id: str) -> tuple[str, int, int]:
    """``"gen/linear/2/17"`` -> ``("linear", 2, 17)``; raises ConfigError otherwise."""
    parts = task_id.split("/")
    if len(parts) != 4 or parts[0] != "gen" or parts[1] not in KINDS:
        raise ConfigError(
            f"Not a generator task id: {task_id!r}. Expected gen/<kind>/<level>/<seed> with "
            f"kind in {', '.join(KINDS)}."
        )
    try:
        level, seed = int(parts[2]), int(parts[3])
    except ValueError:
        raise ConfigError(f"Level and seed of {task_id!r} must be integers.") from None
    if level not in LEVELS:
        raise ConfigError(f"Level of {task_id!r} must be one of {LEVELS}.")
    return parts[1], level, seed
