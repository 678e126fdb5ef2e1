"""The symbolic check, run inside grading worker processes only.

It parses both answers with math-verify (LaTeX and plain expressions) and compares them
with math-verify's ``verify``, gold first (``verify`` is not symmetric). Signal-based
timeouts are switched off (``parsing_timeout=None``, ``timeout_seconds=None``): the
worker runs outside any main-thread guarantee and the pool enforces the time bound by
killing the process.

Relations and sets compare both ways (``x \\ge 3`` matches ``[3, \\infty)`` and the
reverse; math-verify's default only allows a set answer for a relation gold).

Extensions over math-verify:

* plain expressions (polynomials, fractions, radicals, pi) are read by
  :mod:`agentgym.envs.math._fastparse` (sub-millisecond) instead of math-verify's
  parser, and decided by evaluation when both sides are plain;
* equivalence by evaluation (:mod:`agentgym.envs.math._evaluate`), tried first for
  expressions: complex exponentials, trigonometric identities, expanded vs
  factored forms; when it decides, ``simplify`` is not needed (right answers get faster,
  and a clear numeric difference is a wrong answer without ``simplify``);
* ``degrees=True`` (the gold carries a degree sign): an answer in radians is accepted;
* a decimal answer is accepted for an irrational gold value (``1.4142`` for
  ``\\sqrt{2}``) under the same rule the fast path applies to non-terminating fractions
  (within one unit of the last digit and a relative 1e-4).

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

from agentgym.envs.math._evaluate import equal_by_value, same_equation, to_radians
from agentgym.envs.math._fastparse import read
from agentgym.envs.math.fastcheck import Num, parse_value
from agentgym.envs.math.normalize import top_level_equals

logging.getLogger("math_verify").setLevel(logging.CRITICAL)
logging.getLogger("latex2sympy2_extended").setLevel(logging.CRITICAL)


def _parse(answer: str) -> list[Any]:
    return parse("\\boxed{" + answer + "}", parsing_timeout=None)


@lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> tuple[Any, ...]:
    return tuple(_parse(gold))


@lru_cache(maxsize=4096)
def _read_gold(gold: str) -> Any | None:
    return read(gold)


def _moved_left(equation: str) -> Any | None:
    """``a = b`` read as ``a - b`` (plain sides only), or None."""
    sides = top_level_equals(equation)
    if len(sides) != 2:
        return None
    left, right = read(sides[0]), read(sides[1])
    return None if left is None or right is None else left - right


def _plain_verdict(gold: str, pred: str, degrees: bool) -> bool | None:
    """Both answers are plain expressions (:mod:`._fastparse`), or plain equations, and
    evaluation decides."""
    if "=" in gold and "=" in pred:
        g_eq, p_eq = _moved_left(gold), _moved_left(pred)
        if g_eq is not None and p_eq is not None:
            return same_equation(g_eq, p_eq)
        return None
    g = _read_gold(gold)
    if g is None:
        return None
    p = read(pred)
    if p is None:
        return None
    verdict = equal_by_value(g, p)
    if verdict is False and degrees:
        rad = to_radians(g)
        verdict = None if rad is None else equal_by_value(rad, p)
    return verdict


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


def _by_value(golds: tuple[Any, ...], preds: list[Any], pred: str) -> bool | None:
    """Evaluation's verdict on the first parsed forms (None: let math-verify decide)."""
    if not golds or not preds or "\\%" in pred:
        return None
    return equal_by_value(golds[0], preds[0])


def _one(gold: str, pred: str, degrees: bool) -> bool:
    fast = _plain_verdict(gold, pred, degrees)
    if fast is not None:
        return fast
    g = _parse_gold(gold)
    parsed = _parse(pred)
    if not g or not parsed:
        return False
    verdict = _by_value(g, parsed, pred)
    if verdict is None:
        verdict = bool(verify(list(g), parsed, timeout_seconds=None, allow_set_relation_comp=True))
        if not verdict:
            verdict = _decimal_matches_irrational(g, pred)
    if not verdict and degrees:
        rad = to_radians(g[0])
        if rad is not None:
            verdict = bool(
                equal_by_value(rad, parsed[0])
                or verify([rad], parsed, timeout_seconds=None)
                or _decimal_matches_irrational((rad,), pred)
            )
    return verdict


def check(
    gold: str,
    preds: list[str],
    raw: bool = False,
    degrees: bool = False,
    golds: list[str] | None = None,
) -> list[bool]:
    """For each prediction: is it equivalent to the gold answer?

    Args:
        gold / preds: normalised answers, or (``raw=True``) answers as extracted, too long
            to be normalised in the caller; they are then normalised, label-aligned and
            fast-checked here, under the pool's time bound.
        degrees: the gold carries a degree sign (an answer in radians is accepted).
        golds: one gold per prediction, when they differ (labels aligned per answer).
    """
    if raw:
        from agentgym.envs.math.fastcheck import fast_compare
        from agentgym.envs.math.grading import normalize_gold
        from agentgym.envs.math.labels import align_labels
        from agentgym.envs.math.normalize import has_degrees, normalize

        degrees = has_degrees(gold)
        gold_n = normalize_gold(gold)
        out = []
        for p in preds:
            g, n = align_labels(gold_n, normalize(p))
            verdict, _ = fast_compare(g, n)
            out.append(verdict if verdict is not None else _one(g, n, degrees))
        return out
    per_pred = golds if golds is not None else [gold] * len(preds)
    return [_one(g, p, degrees) for g, p in zip(per_pred, preds, strict=True)]
