"""In-process comparison of simple answers, without sympy.

Most answers in math RL are plain numbers: integers, fractions, decimals, percentages,
and short lists, sets, tuples or intervals of them, or a multiple-choice letter. For
those, :func:`fast_compare` decides with exact rational arithmetic in microseconds and
cannot blow up (every number it reads is bounded in length). Anything else (radicals,
expressions, matrices...) is left to math-verify in a worker process
(:mod:`agentgym.envs.math.pool`).

Rules (``gold`` is the reference, ``pred`` the answer being graded):

* numbers are equal when their exact values are equal (``0.5`` = ``\\frac{1}{2}`` =
  ``2/4``; ``2\\frac{1}{2}`` is the mixed number 5/2);
* a decimal answer matches a gold value whose decimal expansion does not terminate
  (1/3, 2/7) when it is within one unit of its last digit *and* within a relative 1e-4
  (``0.3333`` and ``0.33333`` match 1/3; ``0.333`` does not). A gold value with a
  terminating expansion must be matched exactly (``2.9999`` is not 3);
* percentages: ``50\\%`` matches ``50`` and ``0.5``; scientific notation
  (``1.5\\times10^{3}``, ``1.5e3``), repeating decimals (``0.\\overline{3}`` is 1/3) and
  ratios of two numbers (``5:9`` is 5/9, so ``10:18`` and ``\\frac{5}{9}`` match it) are
  numbers;
* a bare comma list (``2,3``, from "2 or 3") and a set ``\\{2,3\\}`` compare as sets;
  parenthesised/bracketed sequences compare in order with the same brackets, so
  ``(1,2)`` != ``(2,1)`` and ``[1,2)`` != ``[1,2]``; a list of several values never
  equals a single value, nor a single expression (``(0,5)+1``, ``\\sqrt{2}``) a list
  of several numbers;
* a gold choice letter (``B``, ``(B)``) is matched by ``B``, ``(B)``, ``b``, ``B) 42``;
* word answers (three letters or more: ``Yes``, ``\\text{odd}``, ``Monday``) compare
  without regard to case.

:func:`fast_compare` returns ``True``/``False`` when it is sure, ``None`` when the
answer needs the full symbolic check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from agentgym.envs.math.normalize import split_top_level, top_level_equals

__all__ = ["Inf", "Num", "Seq", "fast_compare", "parse_choice", "parse_value"]

_MAX_DIGITS = 60  # longer numbers go to the worker (and Fraction stays cheap)
_MAX_ITEMS = 64

_INT = r"\d{1,60}"
_DEC = r"(?:\d{1,60}(?:\.\d{1,60})?|\.\d{1,60})"
_SIGN = r"[+-]?"
_INT_RE = re.compile(rf"({_SIGN})({_DEC})")
_SLASH_RE = re.compile(rf"({_SIGN})({_INT})/({_INT})")
_FRAC_RE = re.compile(rf"({_SIGN})\\frac\{{({_SIGN}{_INT})\}}\{{({_SIGN}{_INT})\}}")
_MIXED_RE = re.compile(rf"({_SIGN})({_INT})\\frac\{{({_INT})\}}\{{({_INT})\}}")
_SCI_RE = re.compile(
    rf"({_SIGN}{_DEC})(?:\\times|\\cdot|\*)10\^(?:\{{({_SIGN}\d{{1,3}})\}}|({_SIGN}\d))"
)
_SCI_E_RE = re.compile(rf"({_SIGN}{_DEC})[eE]([+-]?\d{{1,3}})")
_REPEATING_RE = re.compile(rf"({_SIGN})(\d{{0,30}})\.(\d{{0,30}})\\overline\{{(\d{{1,30}})\}}")
_RATIO_RE = re.compile(rf"({_SIGN}{_DEC}):({_DEC})")
_WORD_RE = re.compile(r"[A-Za-z]{3,40}")
_INF_RE = re.compile(r"([+-]?)(?:\\infty|\\inf|inf|infinity)")
_CHOICE_GOLD_RE = re.compile(r"\(?([A-J])\)?")
_CHOICE_PRED_RE = re.compile(r"\(([A-Ja-j])\).*|([A-J])\).*|([A-Ja-j])|([A-J])[:.].*", re.S)


@dataclass(frozen=True)
class Num:
    """An exact number. ``decimals``: digits after the point when written as a decimal."""

    value: Fraction
    decimals: int | None = None
    percent: bool = False


@dataclass(frozen=True)
class Inf:
    """Plus or minus infinity (interval endpoints)."""

    sign: int


@dataclass(frozen=True)
class Seq:
    """A list ``a,b``, a set ``\\{a,b\\}`` or a bracketed sequence ``(a,b]``."""

    kind: str  # "list" | "set" | "bracket"
    left: str
    right: str
    items: tuple[Num | Inf, ...]


Value = Num | Inf | Seq


def _number(s: str) -> Num | Inf | None:
    percent = False
    if s.endswith("\\%"):
        s, percent = s[:-2], True
    if not s or len(s) > 3 * _MAX_DIGITS:
        return None
    m = _INT_RE.fullmatch(s)
    if m:
        digits = m.group(2)
        val = Fraction(digits)
        if m.group(1) == "-":
            val = -val
        decimals = len(digits.split(".", 1)[1]) if "." in digits else None
        return Num(val, decimals, percent)
    m = _SLASH_RE.fullmatch(s) or _FRAC_RE.fullmatch(s)
    if m:
        num, den = int(m.group(2)), int(m.group(3))
        if den == 0:
            return None
        val = Fraction(num, den)
        return Num(-val if m.group(1) == "-" else val, None, percent)
    m = _MIXED_RE.fullmatch(s)
    if m:
        whole, num, den = int(m.group(2)), int(m.group(3)), int(m.group(4))
        if den == 0 or num >= den:
            return None
        val = whole + Fraction(num, den)
        return Num(-val if m.group(1) == "-" else val, None, percent)
    m = _SCI_RE.fullmatch(s)
    if m:
        exp = int(m.group(2) or m.group(3))
        if abs(exp) > 100:
            return None
        return Num(Fraction(m.group(1)) * Fraction(10) ** exp, None, percent)
    m = _SCI_E_RE.fullmatch(s)
    if m:
        return Num(Fraction(m.group(1)) * Fraction(10) ** int(m.group(2)), None, percent)
    m = _REPEATING_RE.fullmatch(s)
    if m:
        whole, head, rep = m.group(2) or "0", m.group(3), m.group(4)
        val = Fraction(int(whole)) + Fraction(int(head or "0"), 10 ** len(head))
        val += Fraction(int(rep), (10 ** len(rep) - 1) * 10 ** len(head))
        return Num(-val if m.group(1) == "-" else val, None, percent)
    m = _RATIO_RE.fullmatch(s)
    if m and not percent:
        den = Fraction(m.group(2))
        return Num(Fraction(m.group(1)) / den, None, False) if den else None
    m = _INF_RE.fullmatch(s)
    if m and not percent:
        return Inf(-1 if m.group(1) == "-" else 1)
    return None


def parse_value(s: str) -> Value | None:
    """Read a normalised answer as a number, infinity or a flat sequence of them.

    Returns ``None`` when ``s`` is anything else (it then needs the symbolic check).
    """
    if not s:
        return None
    single = _number(s)
    if single is not None:
        return single
    kind, left, right, body = "list", "", "", s
    if s.startswith("\\{") and s.endswith("\\}"):
        kind, left, right, body = "set", "{", "}", s[2:-2]
    elif s[0] in "([" and s[-1] in ")]":
        kind, left, right, body = "bracket", s[0], s[-1], s[1:-1]
    parts = split_top_level(body)
    if len(parts) > _MAX_ITEMS:
        return None
    if kind == "bracket" and len(parts) == 1:
        # "(3)" is 3; "[3]" is not a number we know how to read
        return _number(body) if left == "(" and right == ")" else None
    if kind == "list" and len(parts) == 1:
        return None
    items = []
    for p in parts:
        v = _number(p)
        if v is None:
            return None
        items.append(v)
    return Seq(kind, left, right, tuple(items))


def parse_choice(s: str, *, gold: bool) -> str | None:
    """The multiple-choice letter of ``s`` (``"B"``), or None.

    A gold answer is a choice only as a capital ``A``-``J`` (optionally in parentheses);
    a prediction may also be lower case or followed by the option's text (``B) 42``).
    """
    if gold:
        m = _CHOICE_GOLD_RE.fullmatch(s)
        return m.group(1) if m else None
    parts = split_top_level(s)
    if len(parts) > 1 and sum(_CHOICE_PRED_RE.fullmatch(p) is not None for p in parts) > 1:
        return None  # "(B),(C)": several choices
    m = _CHOICE_PRED_RE.fullmatch(s)
    if not m:
        return None
    letter = m.group(1) or m.group(2) or m.group(3) or m.group(4)
    return letter.upper()


def _terminates(x: Fraction) -> bool:
    d = x.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def _close(gold: Fraction, pred: Fraction, pred_decimals: int | None) -> bool:
    if gold == pred:
        return True
    if pred_decimals is None or pred_decimals < 1 or _terminates(gold):
        return False
    err = abs(gold - pred)
    return err <= Fraction(1, 10**pred_decimals) and err <= abs(gold) / 10_000


def _num_eq(g: Num | Inf, p: Num | Inf) -> bool:
    if isinstance(g, Inf) or isinstance(p, Inf):
        return isinstance(g, Inf) and isinstance(p, Inf) and g.sign == p.sign
    golds = [g.value]
    if g.percent and not p.percent:
        golds.append(g.value / 100)
    preds = [(p.value, p.decimals)]
    if p.percent and not g.percent:
        preds.append((p.value / 100, None if p.decimals is None else p.decimals + 2))
    return any(_close(gv, pv, pd) for gv in golds for pv, pd in preds)


def _same_set(g: tuple[Num | Inf, ...], p: tuple[Num | Inf, ...]) -> bool:
    return all(any(_num_eq(x, y) for y in p) for x in g) and all(
        any(_num_eq(x, y) for x in g) for y in p
    )


def _same_order(g: tuple[Num | Inf, ...], p: tuple[Num | Inf, ...]) -> bool:
    return len(g) == len(p) and all(_num_eq(x, y) for x, y in zip(g, p, strict=True))


def _seq_eq(g: Seq, p: Seq) -> bool | None:
    unordered = {"list", "set"}
    if g.kind in unordered and p.kind in unordered:
        return _same_set(g.items, p.items)
    if g.kind == "bracket" and p.kind == "bracket":
        if (g.left, g.right) != (p.left, p.right):
            return False
        return _same_order(g.items, p.items)
    if g.kind == "bracket" and p.kind == "list":
        return _same_order(g.items, p.items)
    # a list/set gold against a bracketed prediction (or the reverse set case): only
    # an exact ordered match is sure; the rest is math-verify's call
    return True if _same_order(g.items, p.items) else None


#: Notations that may stand for several values (or a set) in one expression.
_SEVERAL_RE = re.compile(
    r"\\(?:pm|mp|cup|cap|in|le|ge|leq|geq|emptyset|mathbb|begin|setminus|\{)(?![a-z])|[<>=;]"
)


def _one_value(pred: str) -> bool:
    """``pred`` is a single expression (``(0,5)+1``, ``\\sqrt{2}``): not a list, set,
    tuple, interval, relation or plus-minus."""
    if _SEVERAL_RE.search(pred) or len(split_top_level(pred)) > 1:
        return False
    return not (pred[:1] in "([" and pred[-1:] in ")]")


def fast_compare(gold: str, pred: str) -> tuple[bool | None, str]:
    """Compare two *normalised* answers. Returns (verdict or None, method)."""
    if not pred:
        return False, "empty"
    if gold == pred:
        return True, "string"
    choice = parse_choice(gold, gold=True)
    if choice is not None:
        return parse_choice(pred, gold=False) == choice, "choice"
    gv = parse_value(gold)
    if gv is None:
        if _WORD_RE.fullmatch(gold) and _WORD_RE.fullmatch(pred):
            return gold.lower() == pred.lower(), "string"
        return None, "symbolic"
    pv = parse_value(pred)
    if pv is None:
        # "4=3": a relation whose left side is a plain number is not a value
        sides = top_level_equals(pred)
        if len(sides) > 1 and _number(sides[0]) is not None:
            return False, "not_a_value"
        if isinstance(gv, Seq) and len(gv.items) > 1 and _one_value(pred):
            return False, "structure"  # one expression is never several values
        return None, "symbolic"
    if isinstance(gv, Seq) and isinstance(pv, Seq):
        verdict = _seq_eq(gv, pv)
        return verdict, "structure" if verdict is not None else "symbolic"
    if isinstance(gv, Seq) or isinstance(pv, Seq):
        seq = gv if isinstance(gv, Seq) else pv
        if len(seq.items) > 1:
            return False, "structure"  # several values never equal one value
        return None, "symbolic"
    return _num_eq(gv, pv), "numeric"
