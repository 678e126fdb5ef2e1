"""The symbolic check, run inside grading worker processes only.

It parses both answers with math-verify (LaTeX and plain expressions) and compares them
with math-verify's ``verify``, gold first (``verify`` is not symmetric). Signal-based
timeouts are switched off (``parsing_timeout=None``, ``timeout_seconds=None``): the
worker runs outside any main-thread guarantee and the pool enforces the time bound by
killing the process.

Relations and sets compare both ways (``x \\ge 3`` matches ``[3, \\infty)`` and the
reverse; math-verify's default only allows a set answer for a relation gold).

Extension over math-verify: a decimal answer is also accepted for an irrational gold
value (``1.4142`` for ``\\sqrt{2}``) under the same rule the fast path applies to
non-terminating fractions (within one unit of the last digit and a relative 1e-4).

Importing this module imports sympy and math-verify (about a second); the parent
process never imports it.
"""

from __future__ import annotations

import logging
from fractions import Fraction
from functools import lru_cache
from typing import Any

import sympy
from math_verify import parse, verify

from agentgym.envs.math.fastcheck import Num, parse_value

logging.getLogger("math_verify").setLevel(logging.CRITICAL)
logging.getLogger("latex2sympy2_extended").setLevel(logging.CRITICAL)


def _parse(answer: str) -> list[Any]:
    return parse("\\boxed{" + answer + "}", parsing_timeout=None)


@lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> tuple[Any, ...]:
    return tuple(_parse(gold))


def _decimal_matches_irrational(gold_parsed: tuple[Any, ...], pred: str) -> bool:
    pv = parse_value(pred)
    if not isinstance(pv, Num) or pv.decimals is None or pv.decimals < 1 or pv.percent:
        return False
    for g in gold_parsed:
        if not isinstance(g, sympy.Expr) or g.free_symbols or g.is_Rational:
            continue
        if g.is_real is False:
            continue
        approx = g.evalf(40)
        if not approx.is_Float:
            continue
        gv = Fraction(str(approx))
        err = abs(gv - pv.value)
        if err <= Fraction(1, 10**pv.decimals) and err <= abs(gv) / 10_000:
            return True
    return False


def check(gold: str, preds: list[str], raw: bool = False) -> list[bool]:
    """For each prediction: is it equivalent to the gold answer?

    Args:
        gold / preds: normalised answers, or (``raw=True``) answers as extracted, too long
            to be normalised in the caller; they are then normalised and fast-checked
            here, under the pool's time bound.
    """
    if raw:
        from agentgym.envs.math.fastcheck import fast_compare
        from agentgym.envs.math.grading import normalize_gold
        from agentgym.envs.math.normalize import align_assignments, normalize

        gold = normalize_gold(gold)
        out = []
        for p in preds:
            n = align_assignments(gold, normalize(p))
            verdict, _ = fast_compare(gold, n)
            out.append(verdict if verdict is not None else check(gold, [n])[0])
        return out
    g = _parse_gold(gold)
    out = []
    for p in preds:
        parsed = _parse(p)
        ok = (
            bool(g)
            and bool(parsed)
            and verify(list(g), parsed, timeout_seconds=None, allow_set_relation_comp=True)
        )
        if not ok and g:
            ok = _decimal_matches_irrational(g, p)
        out.append(bool(ok))
    return out
