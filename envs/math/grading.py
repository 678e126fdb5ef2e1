"""``grade(response, gold)``: is the final answer of a reply right?

Pipeline:

1. **Extract** every final-answer statement (:mod:`agentgym.envs.math.extract`): each
   ``\\boxed{}``, the last ``Answer:`` line, else "the final answer is ..."; after the
   last ``</think>`` when the reply has one.
2. **Select** the final answer (:mod:`agentgym.envs.math.final`). The last final answer
   counts (self-correction: ``\\boxed{14} ... I dropped a sign ... \\boxed{-14}`` is
   graded on ``-14``), as in math-verify and the verl/DAPO reward functions. Statements
   joined by short connectives are one answer: for a multi-part gold (a set, a list, a
   tuple, labelled values, ``\\pm``) they are combined (``\\boxed{2}, \\boxed{5},
   \\boxed{9}`` is the set); for a single-valued gold each must be right, so **hedging**
   (several different candidates offered as alternatives: ``\\boxed{5} or
   \\boxed{6}``, or ``5 or 6`` in one box) is wrong (``reason == "hedged"``).
   ``hedging="reject"`` is stricter: every final answer stated anywhere in the reply
   must be right, so a changed answer is wrong too. ``"last"`` is the default.
3. **Normalise** gold and answer (:mod:`agentgym.envs.math.normalize`) and align their
   labels (:mod:`agentgym.envs.math.labels`: ``t = \\ln 5`` vs ``t_{0} = \\ln 5``,
   ``(m,n)=(5,8)``, ``PQ=3, RS=11``).
4. **Fast path** (:mod:`agentgym.envs.math.fastcheck`): identical strings, numbers,
   percentages, ratios, flat lists/sets/tuples/intervals of numbers, choice letters and
   words are decided in-process with exact arithmetic.
5. **Symbolic path**: everything else goes to math-verify (with sympy) in a worker
   process (:mod:`agentgym.envs.math.pool`), extended with equivalence by evaluation
   (complex exponentials, trigonometric identities, radians for a gold in degrees).

Bound: the grading of a call takes at most ``timeout_s`` (default 1.5 s) plus a few
milliseconds, from any thread, unless the machine is overloaded (below). With up to the
pool's ``max_size`` calls at once (32 on a large machine, 8 on a small one) no call
waits for a worker, so the whole call is bounded the same way; beyond that a call waits
for a free worker, at most ``queue_timeout_s``. At the deadline:

* an answer that looks costly (a power tower, a four-digit exponent or factorial) or
  whose check used half the deadline in CPU (right answers cost 1-50 ms) is wrong
  (``reason == "timeout"``: too costly to check);
* otherwise the worker was starved of CPU by an overloaded machine: it gets up to four
  deadlines to finish, and a right answer still counts. One that still has no verdict,
  or whose worker died, has ``reason`` ``"grader_timeout"`` or ``"grader_crashed"`` and
  ``infra_failure`` set: it is not the agent's fault, and the env raises
  :class:`agentgym.InfraError` instead of scoring it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from agentgym.envs.math.claims import Claim, Outcome, build_claims, evaluate, remember
from agentgym.envs.math.extract import Extraction, extract_answer, strip_boxed
from agentgym.envs.math.final import HEDGING_MODES, Selection, group_statements, select
from agentgym.envs.math.labels import gold_arity
from agentgym.envs.math.normalize import MAX_INLINE_CHARS, has_degrees, looks_costly, normalize
from agentgym.envs.math.pool import QUEUE_TIMEOUT_S, PoolError, get_pool

__all__ = [
    "DEFAULT_HEDGING",
    "DEFAULT_TIMEOUT_S",
    "HEDGING_MODES",
    "INFRA_REASONS",
    "MAX_CANDIDATES",
    "QUEUE_TIMEOUT_S",
    "GradeResult",
    "grade",
    "normalize_gold",
]

#: Default bound on the grading of one call, in seconds (the issue's requirement: 2 s).
DEFAULT_TIMEOUT_S = 1.5
#: Default strictness: the last final answer counts (math-verify, verl/DAPO).
DEFAULT_HEDGING = "last"
#: A final answer with more distinct candidates than this (or than the gold has parts)
#: is not credited; with ``hedging="reject"`` the bound is on the whole reply.
MAX_CANDIDATES = 4
#: Longer replies are not read at all (``reason == "too_long"``): even a linear scan of
#: them would eat into the time bound. Far above any real reply (the env's action space
#: stops at 200,000 characters).
MAX_RESPONSE_CHARS = 1_000_000

REASONS = (
    "correct",
    "no_answer",
    "empty_answer",
    "too_long",
    "too_many_answers",
    "mismatch",
    "hedged",
    "not_a_value",
    "timeout",
    "grader_error",
    "grader_timeout",
    "grader_crashed",
)
#: Reasons that are failures of the grading machinery, not of the answer.
INFRA_REASONS = frozenset({"grader_timeout", "grader_crashed"})

_POOL_STATUS_REASON = {
    "timeout": "timeout",
    "starved": "grader_timeout",
    "busy": "grader_timeout",
    "crashed": "grader_crashed",
    "error": "grader_error",
}


@dataclass(frozen=True)
class GradeResult:
    """The verdict of :func:`grade`.

    Attributes:
        correct: the reply's final answer is equivalent to the gold answer.
        extracted: the final answer found in the reply (raw, before normalisation; the
            parts joined by ``", "`` when several boxes were combined), or ``None`` when
            there was none (or it was empty).
        gold: the gold answer as given.
        format: how the answer was stated: ``"boxed"``, ``"answer_line"``, ``"phrase"``,
            or ``None``.
        formats: every format the reply states a final answer in (``format`` first
            when several).
        reason: one of ``correct``, ``no_answer``, ``empty_answer``, ``too_long``,
            ``too_many_answers``, ``mismatch``, ``hedged`` (several different final
            answers, not all right), ``not_a_value`` (e.g. ``4 = 3``), ``timeout`` (the
            answer is too costly to check), ``grader_error`` (the check failed on the
            answer), and the infrastructure failures ``grader_timeout`` (no verdict in
            time: the machine is overloaded) and ``grader_crashed``.
        method: what decided: ``string``, ``numeric``, ``structure``, ``choice``,
            ``symbolic`` (math-verify), ``not_a_value``, or ``none``.
        candidates: every distinct final-answer statement of the reply.
        final: the statements that make up the final answer (see ``hedging``).
        normalized: the normalised answer that was compared.
        hedging: the strictness used (``"last"`` or ``"reject"``).
        elapsed_s: wall-clock seconds the call took (not deterministic).
        wait_s: seconds of it spent waiting for a free grading worker.
    """

    correct: bool
    extracted: str | None
    gold: str
    format: str | None = None
    formats: tuple[str, ...] = ()
    reason: str = "mismatch"
    method: str = "none"
    candidates: tuple[str, ...] = ()
    normalized: str | None = None
    final: tuple[str, ...] = ()
    hedging: str = DEFAULT_HEDGING
    elapsed_s: float = field(default=0.0, compare=False)
    wait_s: float = field(default=0.0, compare=False)

    @property
    def timed_out(self) -> bool:
        """The check ran out of time (the answer's fault or the machine's)."""
        return self.reason in ("timeout", "grader_timeout")

    @property
    def infra_failure(self) -> bool:
        """No verdict because the grading machinery failed (not the answer's fault)."""
        return self.reason in INFRA_REASONS

    def __bool__(self) -> bool:
        return self.correct


@lru_cache(maxsize=4096)
def _normalize_gold(gold: str) -> str:
    return normalize(strip_boxed(gold))


def normalize_gold(gold: str) -> str:
    """The normalised form of a gold answer (a boxed gold answer is unboxed first).

    Cached: the samples of a group share their gold."""
    return _normalize_gold(str(gold))


def _check_args(timeout_s: float, hedging: str, queue_timeout_s: float) -> None:
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}.")
    if queue_timeout_s < 0:
        raise ValueError(f"queue_timeout_s must be >= 0, got {queue_timeout_s}.")
    if hedging not in HEDGING_MODES:
        raise ValueError(
            f"hedging must be 'last' (the last final answer counts) or 'reject' (every "
            f"final answer stated must be right), got {hedging!r}."
        )


def _extract(response: str) -> Extraction:
    """The reply's final-answer statements (a reply over the size bound is not read)."""
    if not isinstance(response, str):
        response = str(response)
    if len(response) > MAX_RESPONSE_CHARS:
        return Extraction(None, None, (), "too_long")
    return extract_answer(response)


def _gold_equation(gold: str, gold_n: str, inline: bool) -> str | None:
    """The gold normalised with its label (``y = 5 - 2x``), when that differs from ``gold_n``."""
    if inline and "=" in gold:  # "y = 5 - 2x" is also compared as an equation
        full = normalize(strip_boxed(gold), keep_label=True)
        return full if full != gold_n else None
    return None


@dataclass
class _Verdict:
    """What every verdict of one :func:`grade` call records besides its outcome."""

    gold: str
    ex: Extraction
    hedging: str
    start: float
    extracted: str | None
    final: tuple[str, ...] = ()

    def result(
        self,
        correct: bool,
        reason: str,
        method: str,
        normalized: str | None = None,
        wait: float = 0,
    ) -> GradeResult:
        """The :class:`GradeResult` of the call with this outcome (timed now)."""
        return GradeResult(
            correct=correct,
            extracted=self.extracted,
            gold=self.gold,
            format=self.ex.format,
            formats=self.ex.formats,
            reason=reason,
            method=method,
            candidates=self.ex.candidates,
            normalized=normalized,
            final=self.final,
            hedging=self.hedging,
            elapsed_s=time.perf_counter() - self.start,
            wait_s=wait,
        )


def grade(
    response: str,
    gold: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    hedging: str = DEFAULT_HEDGING,
    queue_timeout_s: float = QUEUE_TIMEOUT_S,
) -> GradeResult:
    """Grade the final answer of ``response`` against ``gold``.

    Args:
        response: the model's reply (any text).
        gold: the reference answer (LaTeX or plain, ``$...$`` allowed; ``\\boxed{...}``
            is unwrapped).
        timeout_s: bound on the grading, in seconds (starting the worker pool, once per
            process, is not counted, nor is a wait for a free worker).
        hedging: ``"last"`` (default): the last final answer counts and candidates
            offered as alternatives within it are wrong; ``"reject"``: every final
            answer the reply states must be right.
        queue_timeout_s: longest wait for a free grading worker; a call that waits
            longer gets ``reason == "grader_timeout"``.

    Returns:
        A :class:`GradeResult`; ``result.correct`` is the verdict and
        ``result.infra_failure`` says that there is none.

    Raises:
        ValueError: ``gold`` is empty, or an argument is out of range.
    """
    start = time.perf_counter()
    if not isinstance(gold, str):
        gold = str(gold)
    _check_args(timeout_s, hedging, queue_timeout_s)
    inline = len(gold) <= MAX_INLINE_CHARS
    gold_n = normalize_gold(gold) if inline else gold.strip()
    if not gold_n:
        raise ValueError(
            f"The gold answer {gold!r} is empty after normalisation; every problem needs "
            "a non-empty reference answer."
        )
    ex = _extract(response)
    v = _Verdict(gold, ex, hedging, start, ex.answer)
    if ex.answer is None:
        return v.result(False, ex.reason or "no_answer", "none")
    arity = gold_arity(gold_n) if inline else 1
    sel = select(group_statements(ex.statements, ex.text), arity, hedging)
    v.final = tuple(st.text for st in sel.parts)
    if sel.combine:
        v.extracted = ", ".join(v.final)
    elif v.final:
        v.extracted = v.final[-1]
    limit = max(MAX_CANDIDATES, arity)
    if len(sel.parts) > limit or (hedging == "reject" and len(ex.candidates) > limit):
        return v.result(False, "too_many_answers", "none")

    raw = not inline or any(len(st.text) > MAX_INLINE_CHARS for st in sel.parts)
    degrees = has_degrees(gold) if inline else False
    gold_eq = _gold_equation(gold, gold_n, inline)
    claims = build_claims(
        sel, gold if raw else gold_n, raw=raw, gold_equation=gold_eq, gold_degrees=degrees
    )
    first = claims[0].options[0][0] if claims[0].options and claims[0].options[0] else None
    normalized = None if raw or first is None else first.pred
    outcome = evaluate(claims, degrees)
    if outcome.pending:
        return _symbolic(
            v,
            claims,
            outcome,
            sel,
            normalized,
            raw=raw,
            degrees=degrees,
            timeout_s=timeout_s,
            queue_timeout_s=queue_timeout_s,
        )
    return _finish(v.result, claims, outcome, sel, normalized, 0.0)


def _symbolic(
    v: _Verdict,
    claims: list[Claim],
    outcome: Outcome,
    sel: Selection,
    normalized: str | None,
    *,
    raw: bool,
    degrees: bool,
    timeout_s: float,
    queue_timeout_s: float,
) -> GradeResult:
    """Decide the pending pairs in the worker pool within the time left, then the verdict."""
    remaining = timeout_s - (time.perf_counter() - v.start)
    try:
        reply = get_pool().request(
            outcome.gold_for_pool,
            [p.pred for p in outcome.pending],
            max(0.05, remaining),
            raw=raw,
            options=outcome.pool_options(degrees),
            queue_timeout_s=queue_timeout_s,
            may_starve=not any(looks_costly(p.pred) for p in outcome.pending),
        )
    except PoolError:
        return v.result(False, "grader_crashed", "symbolic", normalized)
    if reply.status != "ok":
        reason = _POOL_STATUS_REASON.get(reply.status, "grader_error")
        return v.result(False, reason, "symbolic", normalized, reply.wait_s)
    if not raw:
        remember(outcome.pending, reply.value, degrees)
    outcome = evaluate(claims, degrees, dict(zip(outcome.pending, reply.value, strict=True)))
    return _finish(v.result, claims, outcome, sel, normalized, reply.wait_s)


def _finish(
    result: Callable[..., GradeResult],
    claims: list[Claim],
    outcome: Outcome,
    sel: Selection,
    normalized: str | None,
    wait: float,
) -> GradeResult:
    """The verdict and its reason once every needed pair is decided."""
    if all(outcome.claim_ok):
        return result(True, "correct", outcome.method, normalized, wait)
    if any(p.method == "empty" for p in claims[0].all_pairs()):
        return result(False, "empty_answer", "none", normalized, wait)
    if outcome.not_a_value:
        return result(False, "not_a_value", "not_a_value", normalized, wait)
    several = (not sel.combine and len(sel.parts) > 1) or not all(outcome.claim_ok[1:])
    reason = "hedged" if several else "mismatch"
    return result(False, reason, outcome.method, normalized, wait)
