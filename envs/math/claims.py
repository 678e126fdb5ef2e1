"""What a selected final answer claims, and deciding it: pairs, fast path, verdict cache.

A reply's final answer (:class:`agentgym.envs.math.final.Selection`) becomes one or more
:class:`Claim`\\ s, each of which must hold: the final answer itself and, with
``hedging="reject"``, every other answer the reply stated. A claim holds when every
(gold, answer) :class:`Pair` of one of its *options* is equivalent: a multi-part answer
combined from several boxes is one option; the same boxes each read as the whole answer
(a reply that restates a full multi-part answer) is another.

Pairs are decided in-process when possible (:func:`agentgym.envs.math.fastcheck.
fast_compare`, then a cache of earlier symbolic verdicts, keyed by the normalised pair:
the samples of one DAPO group often repeat an answer; timeouts are never cached); the
rest are *pending* and go to a worker process in one request.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from agentgym.envs.math.extract import Statement
from agentgym.envs.math.fastcheck import Num, fast_compare, parse_value
from agentgym.envs.math.final import Selection
from agentgym.envs.math.labels import align_labels, gold_arity, join_parts
from agentgym.envs.math.normalize import NAME_RE, has_degrees, normalize, top_level_equals

__all__ = [
    "VERDICT_CACHE_SIZE",
    "Claim",
    "Outcome",
    "Pair",
    "build_claims",
    "cached",
    "evaluate",
    "remember",
]

#: Symbolic verdicts kept in this process.
VERDICT_CACHE_SIZE = 65_536
_verdicts: OrderedDict[tuple[str, str, bool], bool] = OrderedDict()
_verdicts_lock = threading.Lock()


def cached(gold: str, pred: str, degrees: bool) -> bool | None:
    """An earlier symbolic verdict for this pair, or None."""
    key = (gold, pred, degrees)
    with _verdicts_lock:
        verdict = _verdicts.get(key)
        if verdict is not None:
            _verdicts.move_to_end(key)
        return verdict


def remember(pairs: list[Pair], verdicts: list[bool], degrees: bool) -> None:
    """Keep symbolic verdicts for later calls."""
    with _verdicts_lock:
        for pair, verdict in zip(pairs, verdicts, strict=True):
            _verdicts[(pair.gold, pair.pred, degrees)] = bool(verdict)
        while len(_verdicts) > VERDICT_CACHE_SIZE:
            _verdicts.popitem(last=False)


@dataclass(eq=False)
class Pair:
    """A gold answer and an answer to compare (both normalised, unless ``raw``)."""

    gold: str
    pred: str
    raw: bool = False
    verdict: bool | None = None
    method: str = "none"


@dataclass
class Claim:
    """Holds when every pair of one of its options is equivalent."""

    options: list[list[Pair]]

    def all_pairs(self) -> list[Pair]:
        return [p for option in self.options for p in option]


@dataclass(frozen=True)
class _Gold:
    text: str  # normalised (or raw)
    equation: str | None = None  # normalised with its label kept, when it is "y = ..."
    degrees: bool = False  # carries a degree sign


def _is_equation(pred: str) -> bool:
    sides = top_level_equals(pred)
    return len(sides) == 2 and not NAME_RE.fullmatch(sides[0])


def _pair(gold: _Gold, pred: str) -> Pair:
    if gold.equation is not None and _is_equation(pred):
        return Pair(gold.equation, pred)  # "2x + y = 5" against the gold "y = 5 - 2x"
    g, p = align_labels(gold.text, pred)
    return Pair(g, p)


def _single(gold: _Gold, text: str) -> list[list[Pair]]:
    """Options for one stated answer: as it is and, for an answer in degrees against a
    gold in radians (``60^\\circ`` for ``\frac{\\pi}{3}``), converted to radians."""
    n = normalize(text)
    options = [[_pair(gold, n)]]
    marked = "circ" in text or "°" in text or "degree" in text
    degrees_only_here = marked and not gold.degrees and has_degrees(text)
    if degrees_only_here and parse_value(gold.text) is None and isinstance(parse_value(n), Num):
        options.append([_pair(gold, f"\\frac{{{n}\\pi}}{{180}}")])
    return options


def _claim(parts: tuple[Statement, ...], combine: bool, gold: _Gold, raw: bool) -> Claim:
    texts = [st.text for st in parts]
    if raw:
        joined = ",".join(texts)
        if combine:
            return Claim([[Pair(gold.text, joined, raw=True)]])
        return Claim([[Pair(gold.text, t, raw=True) for t in texts]])
    if not combine:
        if len(texts) == 1:
            return Claim(_single(gold, texts[0]))
        return Claim([[_pair(gold, normalize(t)) for t in texts]])
    options = [[_pair(gold, join_parts([(st.label, st.text) for st in parts]))]]
    each = [normalize(t) for t in texts]
    if all(gold_arity(n) > 1 for n in each):  # every box restates a whole answer
        options.append([_pair(gold, n) for n in each])
    return Claim(options)


def build_claims(
    sel: Selection,
    gold: str,
    *,
    raw: bool = False,
    gold_equation: str | None = None,
    gold_degrees: bool = False,
) -> list[Claim]:
    """The claims of a selected final answer (the final answer's own claim first).

    Args:
        sel: the final answer (and, for ``hedging="reject"``, the other answers).
        gold: normalised, or raw when ``raw`` (answers too long to normalise here: the
            worker does it).
        gold_equation: the gold normalised with its label kept, when the gold is an
            equation ``y = ...`` (compared with answers that are equations).
        gold_degrees: the gold carries a degree sign.
    """
    arity = 1 if raw else gold_arity(gold)
    g = _Gold(gold, gold_equation, gold_degrees)
    claims = [_claim(sel.parts, sel.combine, g, raw)]
    for group in sel.others:
        claims.append(_claim(group, arity > 1 and len(group) > 1, g, raw))
    return claims


@dataclass
class Outcome:
    """Where the claims stand after :func:`evaluate`.

    Attributes:
        claim_ok: per claim, True (holds), False (cannot hold) or None (undecided).
        pending: the pairs that need the symbolic check (empty once decided).
        method: what decided the verdict (``symbolic`` when any pair needed it).
        not_a_value: an answer of the final claim is a false relation (``4 = 3``).
    """

    claim_ok: list[bool | None]
    pending: list[Pair] = field(default_factory=list)
    method: str = "none"
    not_a_value: bool = False

    @property
    def gold_for_pool(self) -> str:
        return self.pending[0].gold

    def pool_options(self, degrees: bool) -> dict[str, Any]:
        """Options of the worker request: the degree flag and, when the pending pairs
        do not share one gold (labels aligned differently), every gold."""
        options: dict[str, Any] = {"degrees": degrees} if degrees else {}
        golds = [p.gold for p in self.pending]
        if len(set(golds)) > 1:
            options["golds"] = golds
        return options


def _decide(pair: Pair, degrees: bool) -> None:
    if pair.verdict is not None or pair.raw:
        return
    if not pair.pred:
        pair.verdict, pair.method = False, "empty"
        return
    verdict, method = fast_compare(pair.gold, pair.pred)
    if verdict is None:
        verdict = cached(pair.gold, pair.pred, degrees)
        method = "symbolic"
    pair.verdict, pair.method = verdict, method


def _option_state(option: list[Pair]) -> bool | None:
    if any(p.verdict is False for p in option):
        return False
    return True if all(p.verdict is True for p in option) else None


def evaluate(
    claims: list[Claim], degrees: bool, symbolic: dict[Pair, bool] | None = None
) -> Outcome:
    """Decide what can be decided; list the pairs that still need the symbolic check.

    ``symbolic``: verdicts from a worker for pairs that were pending.
    """
    for pair, verdict in (symbolic or {}).items():
        pair.verdict, pair.method = bool(verdict), "symbolic"
    claim_ok: list[bool | None] = []
    pending: list[Pair] = []
    methods: list[str] = []
    for claim in claims:
        states = []
        for option in claim.options:
            for pair in option:
                _decide(pair, degrees)
                if pair.verdict is False:
                    break  # the rest of this option does not matter
            states.append(_option_state(option))
        if True in states:
            option = claim.options[states.index(True)]
            methods += [p.method for p in option]
            claim_ok.append(True)
        elif all(s is False for s in states):
            claim_ok.append(False)
        else:
            claim_ok.append(None)
            for option, state in zip(claim.options, states, strict=True):
                if state is None:
                    pending += [p for p in option if p.verdict is None and p not in pending]
    if False in claim_ok:
        pending = []  # one claim cannot hold: the verdict is wrong, no need to ask sympy
    first = claims[0].all_pairs()
    methods += [p.method for p in first if p.verdict is False]
    method = "symbolic" if "symbolic" in methods else (methods[0] if methods else "none")
    if pending:
        method = "symbolic"
    return Outcome(
        claim_ok=claim_ok,
        pending=pending,
        method=method,
        not_a_value=any(p.method == "not_a_value" for p in first),
    )
