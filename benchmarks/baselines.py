"""Weak scripted baselines, so a leaderboard always has something to rank against.

Use them as ``--policy scripted:agentgym.benchmarks.baselines:NAME``. Each is a plain
function ``messages -> str``; none looks at an environment's state.

* :func:`guess_zero`: answers every maths problem with ``\\boxed{0}``. Right only when
  the answer happens to be 0: the floor of ``math-balanced``.
* :func:`verbose_guess_zero`: the same guess after ~300 tokens of filler. Same accuracy
  as :func:`guess_zero`, many more tokens: the balanced score must rank it lower or
  equal, never higher.
* :func:`sympy_solver`: a rule-based solver with no model at all: it parses "Simplify
  ...", "Expand ..." and "Solve for x: ..." problems with sympy and answers those;
  every other problem gets ``\\boxed{0}``. A middle rung on ``math-balanced``: right on
  the kinds it parses, wrong on the rest.
* :data:`padded_oracle`: the environment's reference solution after ~1,200 tokens of
  filler. Exactly as accurate as ``oracle`` at many times its length: the balanced
  score must rank it below the oracle (it is env-bound, like ``oracle``).
* :func:`forgetful`: replies ``OK.`` to everything, so it never answers a question
  (``memory-recall`` floor).
* :func:`hoarder`: on every turn lists *every* locker code it can see, asked or not,
  newest first. Its summaries overflow the memory limit and are cut, losing the oldest
  codes, so it remembers only part of what it needs: a middle rung on ``memory-recall``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from agentgym import (
    Completion,
    Message,
    OraclePolicy,
    PolicyError,
    SamplingParams,
    ScriptedPolicy,
    approx_tokens,
)

_FACT = re.compile(r"(?:The code of )?locker (\d+)\s*(?:is|:|=)\s*(\d{4})", re.IGNORECASE)

_FILLER = (
    "Let me think about this problem carefully. I will restate the question, consider "
    "several approaches, and check each step before committing to an answer. "
)


def guess_zero(messages: Sequence[Message]) -> str:
    """Answer ``\\boxed{0}`` to everything."""
    return "The answer is \\boxed{0}."


_SIMPLIFY = re.compile(r"(?:Simplify|Expand)\s+(.+?)\.(?:\s|$)")
_SOLVE = re.compile(r"Solve for ([a-z]):\s*(.+?)\s*=\s*(.+?)\.?\s*$")


def _sympy_answer(problem: str) -> str | None:
    import sympy
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    rules = (*standard_transformations, implicit_multiplication_application, convert_xor)
    first = problem.strip().splitlines()[0] if problem.strip() else ""
    m = _SIMPLIFY.match(first)
    if m:
        expr = parse_expr(m.group(1), transformations=rules)
        return sympy.latex(sympy.expand(sympy.cancel(expr)))
    m = _SOLVE.match(first)
    if m:
        x = sympy.Symbol(m.group(1))
        names = {m.group(1): x}
        lhs = parse_expr(m.group(2), transformations=rules, local_dict=names)
        rhs = parse_expr(m.group(3), transformations=rules, local_dict=names)
        roots = sympy.solve(sympy.Eq(lhs, rhs), x)
        return ", ".join(sympy.latex(r) for r in roots) if roots else None
    return None


def sympy_solver(messages: Sequence[Message]) -> str:
    """Solve simplify/expand/linear problems with sympy; guess 0 on anything else."""
    problem = next((m.content for m in reversed(messages) if m.role == "user"), "")
    try:
        answer = _sympy_answer(problem)
    except Exception:  # unparsable text: this baseline just guesses
        answer = None
    return f"\\boxed{{{answer if answer is not None else 0}}}"


def verbose_guess_zero(messages: Sequence[Message]) -> str:
    """Pad with about 300 tokens of filler, then answer ``\\boxed{0}``."""
    return _FILLER * 8 + "Final answer: \\boxed{0}."


class PaddedOracle:
    """The reference solution preceded by ``pad_copies`` copies of a filler paragraph."""

    name = "padded_oracle"

    def __init__(self, pad_copies: int = 32) -> None:
        self.pad = _FILLER * pad_copies

    def for_env(self, env: Any) -> ScriptedPolicy:
        oracle = OraclePolicy().for_env(env)
        pad = self.pad

        async def act(messages: Sequence[Message], sampling: SamplingParams) -> str:
            return pad + (await oracle(messages, sampling)).text

        count = getattr(env.unwrapped, "count_tokens", approx_tokens)
        return ScriptedPolicy(act, count_tokens=count, name=self.name)

    async def __call__(self, messages: Sequence[Message], sampling: SamplingParams) -> Completion:
        raise PolicyError("padded_oracle is env-bound: run it through agentgym.rollout.")


#: ``scripted:agentgym.benchmarks.baselines:padded_oracle``
padded_oracle = PaddedOracle()


def forgetful(messages: Sequence[Message]) -> str:
    """Reply ``OK.`` to every message, summaries and questions included."""
    return "OK."


def hoarder(messages: Sequence[Message]) -> str:
    """List every locker code visible in the context, the most recently seen first."""
    seen: dict[str, str] = {}
    for m in messages:
        for locker, code in _FACT.findall(m.content):
            seen.pop(locker, None)
            seen[locker] = code
    return "\n".join(f"locker {k}: {v}" for k, v in reversed(seen.items())) or "OK."
