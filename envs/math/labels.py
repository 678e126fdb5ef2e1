"""Labelled and multi-part answers: ``x = 3``, ``(m,n)=(5,8)``, ``PQ=3, RS=11``, ``\\pm 2``.

A *label* is a name written before a value: ``x``, ``x_1``, ``t_0``, ``PQ``, ``f(x)``,
``\\theta``, ``\\angle ABC``. Labels are stripped from both sides the same way, so that
``t = \\ln 5`` matches a gold ``t_{0} = \\ln 5`` and ``x_1 = 3`` matches ``x = 3``
(:func:`agentgym.envs.math.normalize.normalize` already drops the label of a single
value). For several labelled values :func:`align_labels` decides how they compare:

* a gold with several *different* labels (``a=12, b=7``, ``PQ=3, RS=11``) is an ordered
  answer: a reply with the same labels is reordered to the gold's order, a reply
  without labels is read in the gold's order (``12, 7``);
* a gold whose labels are one indexed family (``x_1=2, x_2=3``: the roots of an
  equation) is a set of values: labels are dropped on both sides;
* a gold with a labelled tuple (``(m,n)=(5,8)``) is the tuple; a reply may label the
  values one by one (``n=8, m=5``) or not at all;
* an unlabelled tuple gold (``(2,3)``) takes a reply's labelled values in the
  alphabetical order of their names (``y=3, x=2``); an unlabelled list or set gold
  takes a reply's values with their labels dropped.

:func:`gold_arity` says how many parts a gold answer has (a set, a list, a tuple,
labelled values, ``\\pm``), which decides whether several boxes of a reply may be
combined into one answer (:mod:`agentgym.envs.math.final`); :func:`join_parts` does the
combining.
"""

from __future__ import annotations

import re

from agentgym.envs.math.normalize import (
    NAME_RE,
    align_assignments,
    normalize,
    split_top_level,
    top_level_equals,
)

__all__ = ["align_labels", "gold_arity", "join_parts", "split_label"]

_TUPLE_LABEL_RE = re.compile(r"\(([A-Za-z](?:_[A-Za-z0-9])?(?:,[A-Za-z](?:_[A-Za-z0-9])?)+)\)")
# a label written in raw LaTeX, before normalisation ("x_{1} = ", "\theta=", "PQ =")
_RAW_LABEL_RE = re.compile(
    r"\s*\$?\s*((?:\\[A-Za-z]+|[A-Za-z]{1,6})(?:_\{?[A-Za-z0-9]{1,4}\}?)?(?:\([A-Za-z0-9]{1,3}\))?)"
    r"\s*=\s*(?![=<>])"
)


def _labelled(s: str) -> list[tuple[str | None, str]] | None:
    """``a=1,b=2`` -> [("a","1"), ("b","2")]; None when a part is a chain or relation."""
    if "=" not in s:
        return [(None, part) for part in split_top_level(s)]
    out: list[tuple[str | None, str]] = []
    for part in split_top_level(s):
        sides = top_level_equals(part)
        if len(sides) == 1:
            out.append((None, part))
        elif len(sides) == 2 and NAME_RE.fullmatch(sides[0]):
            out.append((sides[0], sides[1]))
        else:
            return None
    return out


def _all_named(items: list[tuple[str | None, str]] | None) -> list[str] | None:
    """The names when every item has a distinct one (and there are at least two)."""
    if not items or len(items) < 2:
        return None
    names = [n for n, _ in items]
    if any(n is None for n in names) or len(set(names)) != len(names):
        return None
    return names  # type: ignore[return-value]


def _tuple_label(s: str) -> tuple[list[str], str] | None:
    """``(m,n)=(5,8)`` -> (["m", "n"], "(5,8)")."""
    if "=" not in s:
        return None
    sides = top_level_equals(s)
    if len(sides) != 2:
        return None
    m = _TUPLE_LABEL_RE.fullmatch(sides[0])
    if not m:
        return None
    return m.group(1).split(","), sides[1]


def _indexed_family(names: list[str]) -> bool:
    """``x_1, x_2``: one letter with different indices (roots, in no particular order)."""
    bases = {n.split("_", 1)[0] for n in names}
    return len(bases) == 1 and all("_" in n for n in names)


def _is_tuple(s: str) -> bool:
    return s.startswith("(") and s.endswith(")") and len(split_top_level(s[1:-1])) > 1


def _values_in(order: list[str], items: list[tuple[str | None, str]]) -> str:
    by_name = dict(items)
    return "(" + ",".join(by_name[n] for n in order) + ")"  # type: ignore[index]


def align_labels(gold: str, pred: str) -> tuple[str, str]:
    """Rewrite two *normalised* answers so that their labels compare consistently.

    Returns the (gold, pred) pair to compare; see the module docstring for the rules.
    Answers without labels come back unchanged.
    """
    if "=" not in gold and "=" not in pred:
        return gold, pred
    tl = _tuple_label(gold)
    tuple_names: list[str] | None = None
    if tl is not None:
        tuple_names, gold = tl
    tp = _tuple_label(pred)
    if tp is not None:
        pred = tp[1]
    p_items = _labelled(pred)
    p_names = _all_named(p_items)
    if tuple_names is not None:
        if p_names is not None and sorted(p_names) == sorted(tuple_names):
            pred = _values_in(tuple_names, p_items)  # type: ignore[arg-type]
        return gold, pred
    g_items = _labelled(gold)
    g_names = _all_named(g_items)
    if g_names is not None:
        values = [v for _, v in g_items]  # type: ignore[union-attr]
        if _indexed_family(g_names):
            gold = ",".join(values)
            if p_names is not None:
                pred = ",".join(v for _, v in p_items)  # type: ignore[union-attr]
            return gold, pred
        gold = "(" + ",".join(values) + ")"
        if p_names is not None and sorted(p_names) == sorted(g_names):
            pred = _values_in(g_names, p_items)  # type: ignore[arg-type]
        elif p_items is not None and all(n is None for n, _ in p_items) and len(p_items) > 1:
            pred = "(" + pred + ")"
        return gold, pred
    if _is_tuple(gold):
        return gold, align_assignments(gold, pred)
    if p_names is not None:
        pred = ",".join(v for _, v in p_items)  # type: ignore[union-attr]
    return gold, pred


def gold_arity(gold: str) -> int:
    """How many parts a *normalised* gold answer has (1 for a single value).

    Sets, lists, tuples (and intervals, which cannot be told from a pair) count their
    items; labelled values count the labels; ``\\pm x`` counts two. A half-open
    interval ``[a,b)`` and a matrix are single values.
    """
    tl = _tuple_label(gold)
    if tl is not None:
        gold = tl[1]
    if gold.startswith("\\pm"):
        return 2
    parts = split_top_level(gold)
    if len(parts) > 1:
        return len(parts)
    if gold.startswith("\\{") and gold.endswith("\\}"):
        return max(1, len(split_top_level(gold[2:-2])))
    if gold[:1] in "([" and gold[-1:] in ")]" and gold[0] + gold[-1] in ("()", "[]"):
        return max(1, len(split_top_level(gold[1:-1])))
    return 1


def split_label(raw: str) -> tuple[str | None, str]:
    """``"x_{1} = 5"`` -> ("x_1", "5") for a raw answer with a single leading label."""
    m = _RAW_LABEL_RE.match(raw)
    if not m:
        return None, raw
    rest = raw[m.end() :]
    if not rest.strip() or "=" in rest:
        return None, raw
    return normalize(m.group(1)), rest


def join_parts(parts: list[tuple[str | None, str]]) -> str:
    """One normalised answer from several boxed parts ``(outside label, raw text)``.

    Each part is normalised on its own (units, delimiters...); when every part carries
    a label (``a = \\boxed{12}`` or ``\\boxed{a = 12}``) and the labels differ, they are
    kept (``a=12,b=7``) for :func:`align_labels`; otherwise the values are listed.
    """
    items: list[tuple[str | None, str]] = []
    for outside, raw in parts:
        inside, value = split_label(raw)
        label = inside or (normalize(outside) if outside else None)
        items.append((label, normalize(value)))
    labels = [n for n, _ in items]
    if all(labels) and len(set(labels)) == len(labels):
        return ",".join(f"{n}={v}" for n, v in items)
    return ",".join(v for _, v in items)
