"""Equivalence by evaluation, run inside grading worker processes only (imports sympy).

math-verify decides equality of expressions with ``simplify``, which misses identities
a reviewer accepts at a glance and costs tens of milliseconds when it succeeds. This
module evaluates both sides instead:

* **constants** (no free variables) are evaluated to 30 significant digits: ``\\cos\\pi``
  = -1, ``e^{2\\pi i}`` = 1, ``e^{i\\pi/3}`` = 1/2 + (sqrt 3/2) i, ``\\sin 30^\\circ`` = 1/2.
  A symbol named ``i`` is the imaginary unit (math-verify reads ``e^{2\\pi i}`` with a
  real symbol ``i``);
* **expressions** with the same free variables are evaluated at three fixed generic
  real points (one negative): equal at all three (to 1e-20 relative) means equal, as
  for ``\\sin^2x + \\cos^2x`` = 1, ``2\\sin x\\cos x`` = ``\\sin 2x``, ``(x+1)^2`` =
  ``x^2+2x+1``; a clear difference at one point means different;
* matrices and tuples compare entry by entry;
* **equations** ``a = b`` and ``c = d`` are the same when ``a - b`` is a constant nonzero
  multiple of ``c - d`` (:func:`same_equation`: ``2x + y = 5`` and ``y = 5 - 2x``);
* **degrees**: when the gold carries a degree sign, an answer in radians is also
  accepted (``\\frac{\\pi}{3}`` for ``60^\\circ``).

:func:`equal_by_value` returns ``True``/``False`` when the evaluation decides, ``None``
when it cannot (relations, sets, floats, percentages, symbols that differ, evaluation
errors): math-verify's verdict then stands. It runs under the worker's deadline like
everything else there.
"""

from __future__ import annotations

from typing import Any

import sympy

__all__ = ["equal_by_value", "same_equation", "to_radians"]

#: Generic evaluation points: irrational-looking, away from the usual singular points.
_POINTS = (
    sympy.Rational(6180339887, 10**10),
    sympy.Rational(-13247179572, 10**10),
    sympy.Rational(27182818284, 10**10),
)
_DIGITS = 30
_SAME = sympy.Rational(1, 10**20)
_DIFFERENT = sympy.Rational(1, 10**8)


def _imaginary(e: Any) -> Any:
    """``e`` with every free symbol named ``i`` replaced by the imaginary unit."""
    try:
        subs = {s: sympy.I for s in e.free_symbols if s.name == "i"}
    except AttributeError:
        return e
    return e.xreplace(subs) if subs else e


def _plain(e: Any) -> bool:
    return isinstance(e, sympy.Expr) and not isinstance(e, sympy.Symbol) and not e.has(sympy.Float)


def _number(e: Any) -> complex | None:
    try:
        v = sympy.N(e, _DIGITS)
    except Exception:
        return None
    if not v.is_number or v.has(sympy.nan, sympy.zoo, sympy.oo, -sympy.oo):
        return None
    return v


def _compare_numbers(a: Any, b: Any) -> bool | None:
    va, vb = _number(a), _number(b)
    if va is None or vb is None:
        return None
    try:
        diff = abs(sympy.N(va - vb, _DIGITS))
        scale = max(sympy.Integer(1), abs(va), abs(vb))
    except Exception:
        return None
    if diff <= _SAME * scale:
        return True
    if diff >= _DIFFERENT * scale:
        return False
    return None


def _compare_expr(g: Any, p: Any) -> bool | None:
    if not (_plain(g) and _plain(p)):
        return None
    g, p = _imaginary(g), _imaginary(p)
    names_g = {s.name for s in g.free_symbols}
    if names_g != {s.name for s in p.free_symbols}:
        return None
    if not names_g:
        return _compare_numbers(g, p)
    symbols = sorted(g.free_symbols | p.free_symbols, key=lambda s: s.name)
    seen = 0
    for k, point in enumerate(_POINTS):
        values = {s: point + sympy.Rational(j, 7) * (k + 1) for j, s in enumerate(symbols)}
        try:
            verdict = _compare_numbers(g.xreplace(values), p.xreplace(values))
        except Exception:
            verdict = None
        if verdict is False:
            return False
        seen += verdict is True
    return True if seen >= 2 else None


def equal_by_value(g: Any, p: Any) -> bool | None:
    """Decide ``g == p`` by evaluation (see the module docstring), or None."""
    if isinstance(g, sympy.MatrixBase) and isinstance(p, sympy.MatrixBase):
        if g.shape != p.shape:
            return False
        return _all(equal_by_value(a, b) for a, b in zip(g, p, strict=True))
    if isinstance(g, sympy.Tuple) and isinstance(p, sympy.Tuple):
        if len(g) != len(p):
            return False
        return _all(equal_by_value(a, b) for a, b in zip(g, p, strict=True))
    return _compare_expr(g, p)


def _all(verdicts: Any) -> bool | None:
    out: bool | None = True
    for v in verdicts:
        if v is False:
            return False
        if v is None:
            out = None
    return out


def same_equation(g: Any, p: Any) -> bool | None:
    """``g = 0`` and ``p = 0`` (both sides moved left) are the same equation: ``g / p`` is
    the same nonzero constant at three generic points. None when it cannot tell."""
    if not (_plain(g) and _plain(p)):
        return None
    g, p = _imaginary(g), _imaginary(p)
    if {s.name for s in g.free_symbols} != {s.name for s in p.free_symbols} or not g.free_symbols:
        return None
    symbols = sorted(g.free_symbols | p.free_symbols, key=lambda s: s.name)
    ratios = []
    for k, point in enumerate(_POINTS):
        values = {s: point + sympy.Rational(j, 7) * (k + 1) for j, s in enumerate(symbols)}
        try:
            vg, vp = _number(g.xreplace(values)), _number(p.xreplace(values))
        except Exception:
            continue
        if vg is None or vp is None or abs(vp) < _DIFFERENT:
            continue
        ratios.append(sympy.N(vg / vp, _DIGITS))
    if len(ratios) < 2:
        return None
    first = ratios[0]
    if abs(first) < _DIFFERENT:
        return None
    return all(_compare_numbers(first, r) is True for r in ratios[1:])


def to_radians(g: Any) -> Any | None:
    """``g`` degrees in radians, for a constant ``g`` (else None)."""
    if isinstance(g, sympy.Expr) and not g.free_symbols:
        return g * sympy.pi / 180
    return None
