"""``grade(response, gold)``: is the final answer of a reply right?

Pipeline:

1. **Extract** the final answer (:mod:`agentgym.envs.math.extract`): the last
   ``\\boxed{}``, else the last ``Answer:`` line, else "the final answer is ...". Every
   distinct final-answer statement must be right (hedging is not credited); an empty box
   is wrong; more than :data:`MAX_CANDIDATES` distinct statements is wrong.
2. **Normalise** gold and answer (:mod:`agentgym.envs.math.normalize`).
3. **Fast path** (:mod:`agentgym.envs.math.fastcheck`): identical strings, numbers,
   percentages, flat lists/sets/tuples/intervals of numbers and choice letters are
   decided in-process with exact arithmetic.
4. **Symbolic path**: everything else goes to math-verify (with sympy) in a worker
   process (:mod:`agentgym.envs.math.pool`) that is killed if it misses the deadline.

Bound: a call returns within ``timeout_s`` (default 1.5 s) plus a few milliseconds,
from any thread, however many run at once; a timeout counts as wrong (``reason ==
"timeout"``). Starting the worker processes (about a second, once per process; see
:func:`agentgym.envs.math.pool.warm_up`) is not counted.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from agentgym.envs.math.extract import Extraction, extract_answer, strip_boxed
from agentgym.envs.math.fastcheck import fast_compare
from agentgym.envs.math.normalize import MAX_INLINE_CHARS, align_assignments, normalize
from agentgym.envs.math.pool import PoolError, get_pool

__all__ = ["DEFAULT_TIMEOUT_S", "MAX_CANDIDATES", "GradeResult", "grade", "normalize_gold"]

#: Default bound on one call, in seconds (the issue's requirement is 2 s).
DEFAULT_TIMEOUT_S = 1.5
#: A reply with more distinct final-answer statements than this is not credited.
MAX_CANDIDATES = 4
#: Longer replies are not read at all (``reason == "too_long"``): even a linear scan of
#: them would eat into the time bound. Far above any real reply (the env's action space
#: stops at 200,000 characters).
MAX_RESPONSE_CHARS = 1_000_000

#: Symbolic verdicts kept in this process, keyed by the normalised (gold, answer): the
#: samples of one DAPO group often repeat the same answer. Timeouts are never cached.
VERDICT_CACHE_SIZE = 65_536
_verdicts: OrderedDict[tuple[str, str], bool] = OrderedDict()
_verdicts_lock = threading.Lock()


def _cached(gold: str, pred: str) -> bool | None:
    with _verdicts_lock:
        verdict = _verdicts.get((gold, pred))
        if verdict is not None:
            _verdicts.move_to_end((gold, pred))
        return verdict


def _remember(gold: str, preds: list[str], verdicts: list[bool]) -> None:
    with _verdicts_lock:
        for pred, verdict in zip(preds, verdicts, strict=True):
            _verdicts[(gold, pred)] = bool(verdict)
        while len(_verdicts) > VERDICT_CACHE_SIZE:
            _verdicts.popitem(last=False)


REASONS = (
    "correct",
    "no_answer",
    "empty_answer",
    "too_long",
    "too_many_answers",
    "mismatch",
    "not_a_value",
    "timeout",
    "grader_error",
)


@dataclass(frozen=True)
class GradeResult:
    """The verdict of :func:`grade`.

    Attributes:
        correct: the reply's final answer is equivalent to the gold answer.
        extracted: the final answer found in the reply (raw, before normalisation), or
            ``None`` when there was none (or it was empty).
        gold: the gold answer as given.
        format: how the answer was stated: ``"boxed"``, ``"answer_line"``, ``"phrase"``,
            or ``None``.
        formats: every format the reply states a final answer in (``format`` first
            when several).
        reason: one of ``correct``, ``no_answer``, ``empty_answer``, ``too_long``,
            ``too_many_answers``, ``mismatch``, ``not_a_value`` (e.g. ``4 = 3``),
            ``timeout``, ``grader_error``.
        method: what decided: ``string``, ``numeric``, ``structure``, ``choice``,
            ``symbolic`` (math-verify), ``not_a_value``, or ``none``.
        candidates: every distinct final-answer statement of the reply (all must be right).
        normalized: the normalised answer that was compared.
        elapsed_s: wall-clock seconds the call took (not deterministic).
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
    elapsed_s: float = field(default=0.0, compare=False)

    @property
    def timed_out(self) -> bool:
        return self.reason == "timeout"

    def __bool__(self) -> bool:
        return self.correct


def normalize_gold(gold: str) -> str:
    """The normalised form of a gold answer (a boxed gold answer is unboxed first)."""
    return normalize(strip_boxed(str(gold)))


def grade(response: str, gold: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> GradeResult:
    """Grade the final answer of ``response`` against ``gold``.

    Args:
        response: the model's reply (any text).
        gold: the reference answer (LaTeX or plain; ``\\boxed{...}`` is unwrapped).
        timeout_s: bound on the whole call, in seconds (starting the worker pool, once
            per process, is not counted). A call that runs out of time is wrong with
            ``reason == "timeout"``.

    Returns:
        A :class:`GradeResult`; ``result.correct`` is the verdict.

    Raises:
        ValueError: ``gold`` is empty, or ``timeout_s`` is not positive.
    """
    start = time.perf_counter()
    if not isinstance(gold, str):
        gold = str(gold)
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}.")
    inline = len(gold) <= MAX_INLINE_CHARS
    gold_n = normalize_gold(gold) if inline else gold.strip()
    if not gold_n:
        raise ValueError(
            f"The gold answer {gold!r} is empty after normalisation; every problem needs "
            "a non-empty reference answer."
        )
    if not isinstance(response, str):
        response = str(response)
    if len(response) > MAX_RESPONSE_CHARS:
        ex = Extraction(None, None, (), "too_long")
    else:
        ex = extract_answer(response)

    def result(
        correct: bool, reason: str, method: str, normalized: str | None = None
    ) -> GradeResult:
        return GradeResult(
            correct=correct,
            extracted=ex.answer,
            gold=gold,
            format=ex.format,
            formats=ex.formats,
            reason=reason,
            method=method,
            candidates=ex.candidates,
            normalized=normalized,
            elapsed_s=time.perf_counter() - start,
        )

    if ex.answer is None:
        return result(False, ex.reason or "no_answer", "none")
    if len(ex.candidates) > MAX_CANDIDATES:
        return result(False, "too_many_answers", "none")

    if not inline or any(len(c) > MAX_INLINE_CHARS for c in ex.candidates):
        # too long to normalise here: the worker does all of it, under the deadline
        pending, raw, first = list(ex.candidates), True, None
    else:
        raw = False
        normalized = [align_assignments(gold_n, normalize(c)) for c in ex.candidates]
        first = normalized[0]
        pending = []
        methods: list[str] = []
        for n in normalized:
            if not n:
                return result(False, "empty_answer", "none", n)
            verdict, method = fast_compare(gold_n, n)
            if verdict is None:
                verdict = _cached(gold_n, n)
            if verdict is False:
                reason = "not_a_value" if method == "not_a_value" else "mismatch"
                return result(False, reason, method, first)
            if verdict is None:
                pending.append(n)
            else:
                methods.append(method)
        if not pending:
            return result(True, "correct", methods[0], first)

    remaining = timeout_s - (time.perf_counter() - start)
    try:
        status, value = get_pool().run(
            gold if raw else gold_n, pending, max(0.0, remaining), raw=raw
        )
    except PoolError:
        return result(False, "grader_error", "symbolic", first)
    if status == "timeout":
        return result(False, "timeout", "symbolic", first)
    if status != "ok":
        return result(False, "grader_error", "symbolic", first)
    if not raw:
        _remember(gold_n, pending, value)
    ok = all(value)
    return result(ok, "correct" if ok else "mismatch", "symbolic", first)
