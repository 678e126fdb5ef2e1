"""Which final-answer statements of a reply make up its final answer.

A reply may state more than one final answer (:func:`agentgym.envs.math.extract.
extract_answer` finds them all). The text *between* two consecutive statements says how
they relate, read as a careful reviewer would:

* **rejected**: the text ends in a negation (``\\boxed{5}, not \\boxed{6}``, "rather
  than", "instead of"): the second statement is a value the reply rules out; it is
  dropped.
* **correction**: the text has a correction cue (wait, hmm, actually, mistake, wrong,
  recheck, let me, however, but, ...): the second replaces the first
  (``\\boxed{14}. Hmm, I dropped a sign; the answer is \\boxed{-14}``).
* **conclusion**: otherwise, a cue that draws a conclusion (so, thus, therefore, hence,
  "the answer is", finally): the second replaces the first, which was a step
  (``\\boxed{12} and \\boxed{14}, so the answer is \\boxed{26}``).
* **hedge**: otherwise, a cue that offers alternatives (or, maybe, perhaps, possibly,
  either, alternatively, "could be", "might be"): both are candidates of one answer
  (``\\boxed{5} or maybe \\boxed{6}``).
* **together**: otherwise, short connective text (at most 80 characters once math
  delimiters, spacing and labels are removed; no sentence or paragraph break): both are
  parts of one answer (``\\boxed{(4,1)}, \\boxed{(1,4)}``; ``\\boxed{a = 12} \\quad\\text{and}
  \\quad \\boxed{b = 7}``; one per line).
* **sequence**: anything else (reasoning in between): the second replaces the first,
  as the last final answer counts in math-verify and the verl/DAPO reward functions.

Statements joined by *hedge* or *together* form a **group**. :func:`select` picks the
final answer from the groups:

* the **last group** is the final answer. For a single-valued gold every distinct
  statement in it must be right, so hedging (``5 or 6``) is never credited; for a
  multi-part gold (a set, a list, a tuple, labelled values, ``\\pm``) its statements are
  combined into one answer, and when it has fewer distinct parts than the gold, earlier
  groups are added while they bring values for labels not given yet (a reply that finds
  ``a = \\boxed{12}`` and, after more work, ``b = \\boxed{7}``; a new value for a label
  already given is a correction). Unlabelled boxes separated by reasoning are not
  combined: the later one replaces the earlier;
* with ``hedging="reject"`` (strict) every *other* group must be right too, so a reply
  that changed its final answer is wrong even when its last answer is right.

Everything here is linear in the length of the reply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentgym.envs.math.extract import Statement
from agentgym.envs.math.labels import split_label
from agentgym.envs.math.normalize import normalize

__all__ = ["HEDGING_MODES", "Group", "Selection", "group_statements", "link", "select"]

#: Values of the ``hedging`` argument: ``"last"`` (the last final answer counts, hedges
#: inside it are wrong; the field's convention) or ``"reject"`` (every final answer the
#: reply states must be right).
HEDGING_MODES = ("last", "reject")

#: Connective text longer than this (after cleaning) is reasoning, not a connective.
MAX_CONNECTIVE_CHARS = 80

_CORRECTION_RE = re.compile(
    r"(?i)(?<![a-z])(?:wait|hmm+|actually|oops|sorry|mistake[ns]?|mistaken|error|wrong|"
    r"incorrect|correct(?:ion|ed|ing)?|re-?check\w*|double[- ]?check\w*|re-?calculat\w*|"
    r"re-?comput\w*|re-?evaluat\w*|re-?examin\w*|reconsider\w*|re-?do|redid|revis\w*|"
    r"instead|however|but|no[,.!;:]|dropped|missed|forgot|fix\w*|let me|let's|verif\w*|"
    r"check\w*|mis\w+|typo|scratch that)(?![a-z])"
)
_CONCLUSION_RE = re.compile(
    r"(?i)(?<![a-z])(?:so|thus|therefore|hence|finally|overall|in (?:total|conclusion|summary)|"
    r"the (?:final )?(?:answer|result) (?:is|=))(?![a-z])|\\therefore"
)
_HEDGE_RE = re.compile(
    r"(?i)(?<![a-z\\])(?:or|maybe|perhaps|possibly|either|alternatively|otherwise|"
    r"(?:could|might|may) (?:also )?be|not sure|unsure)(?![a-z])|\?"
)
_HEDGE_START_RE = re.compile(
    r"(?i)[\s.,;:!]*(?:or|alternatively|another (?:possible )?answer|it (?:could|might|may) "
    r"also be|maybe|perhaps|possibly)(?![a-z])"
)
_REJECT_END_RE = re.compile(
    r"(?i)(?:(?<![a-z])(?:not|rather than|instead of|and not|but not)|\\neq?|\\not=|≠)"
    r"[\s$:=]*$"
)
_MATH_NOISE_RE = re.compile(
    r"\\(?:quad|qquad|[,;:! ]|\(|\)|\[|\]|displaystyle|text(?:bf|it|rm)?|mathrm|mbox)"
    r"(?![A-Za-z])|\$|&|\\\\|[{}*_~]"
)
_LABEL_RE = re.compile(
    r"(?:\\[A-Za-z]+|[A-Za-z]{1,6})(?:_\{?[A-Za-z0-9]{1,4}\}?)?(?:\([A-Za-z0-9]{1,3}\))?\s*="
)
_SENTENCE_BREAK_RE = re.compile(r"(?<!\d)[.!?;](?=\s+\S)|\n\s*\n")


def link(between: str) -> str:
    """How two consecutive statements relate, from the text between them.

    Returns ``"rejected"``, ``"correction"``, ``"hedge"``, ``"together"`` or
    ``"sequence"`` (a conclusion, or reasoning; see the module docstring).
    """
    if len(between) > 4 * MAX_CONNECTIVE_CHARS:
        # long reasoning: a negation at its end, an alternative announced at its start
        # ("Alternatively, ..."), or a correction cue decide; otherwise it is a sequence
        tail = between[-MAX_CONNECTIVE_CHARS:]
        if _REJECT_END_RE.search(tail):
            return "rejected"
        head = _MATH_NOISE_RE.sub(" ", between[: MAX_CONNECTIVE_CHARS // 2])
        if _HEDGE_START_RE.match(head):
            return "hedge"
        return "correction" if _CORRECTION_RE.search(between) else "sequence"
    if _REJECT_END_RE.search(between):
        return "rejected"
    if _CORRECTION_RE.search(between):
        return "correction"
    cleaned = _MATH_NOISE_RE.sub(" ", between)
    if _CONCLUSION_RE.search(cleaned):
        return "sequence"
    if _HEDGE_RE.search(cleaned):
        return "hedge"
    cleaned = _LABEL_RE.sub(" ", cleaned)
    if _SENTENCE_BREAK_RE.search(between) or len(" ".join(cleaned.split())) > (
        MAX_CONNECTIVE_CHARS
    ):
        return "sequence"
    return "together"


@dataclass(frozen=True)
class Group:
    """Statements that make up one final answer (joined by *hedge* or *together*).

    Attributes:
        statements: in the order of the reply.
        hedged: some of them are joined by a hedge cue.
        after: how the group follows the previous one: ``"correction"``,
            ``"sequence"``, or ``None`` for the first group.
    """

    statements: tuple[Statement, ...]
    hedged: bool = False
    after: str | None = None


def group_statements(statements: tuple[Statement, ...] | list[Statement], text: str) -> list[Group]:
    """Split a reply's statements into groups (rejected values are dropped)."""
    groups: list[Group] = []
    current: list[Statement] = []
    hedged = False
    after: str | None = None
    prev: Statement | None = None
    for st in statements:
        if prev is None:
            current, prev = [st], st
            continue
        kind = link(text[prev.end : st.start])
        if kind == "rejected":
            continue
        if kind in ("hedge", "together"):
            current.append(st)
            hedged = hedged or kind == "hedge"
        else:
            groups.append(Group(tuple(current), hedged, after))
            current, hedged, after = [st], False, kind
        prev = st
    if current:
        groups.append(Group(tuple(current), hedged, after))
    return groups


def _key(s: str) -> str:
    return "".join(s.split())


def _label(st: Statement) -> str | None:
    return split_label(st.text)[0] or (normalize(st.label) if st.label else None)


def _distinct(statements: tuple[Statement, ...]) -> list[Statement]:
    seen: dict[str, Statement] = {}
    for st in statements:
        seen.setdefault(_key(st.text), st)
    return list(seen.values())


@dataclass(frozen=True)
class Selection:
    """The final answer of a reply, as :func:`select` chose it.

    Attributes:
        parts: the distinct statements of the final answer, in reply order.
        combine: the parts are pieces of one multi-part answer (join them); otherwise
            each part is a candidate for the whole answer and all must be right.
        hedged: the final group joins candidates with a hedge cue.
        others: the distinct statements of every other group (``hedging="reject"``
            only): each group must be right too.
    """

    parts: tuple[Statement, ...]
    combine: bool
    hedged: bool = False
    others: tuple[tuple[Statement, ...], ...] = ()


def select(groups: list[Group], arity: int, hedging: str = "last") -> Selection:
    """Pick the final answer from ``groups`` for a gold answer of ``arity`` parts."""
    if hedging not in HEDGING_MODES:
        raise ValueError(f"hedging must be one of {HEDGING_MODES}, got {hedging!r}.")
    first = len(groups) - 1
    chosen = list(groups[first].statements)
    if arity > 1:
        while first > 0 and len(_distinct(tuple(chosen))) < arity:
            labels = [_label(st) for st in chosen]
            earlier = [_label(st) for st in groups[first - 1].statements]
            if None in labels or None in earlier or set(labels) & set(earlier):
                break  # only values for labels not given yet are added
            first -= 1
            chosen = list(groups[first].statements) + chosen
    parts = tuple(_distinct(tuple(chosen)))
    others: tuple[tuple[Statement, ...], ...] = ()
    if hedging == "reject":
        others = tuple(tuple(_distinct(g.statements)) for g in groups[:first])
    return Selection(
        parts=parts,
        combine=arity > 1 and len(parts) > 1,
        hedged=groups[-1].hedged,
        others=others,
    )
