"""Weak scripted baselines, so a leaderboard always has something to rank against.

Use them as ``--policy scripted:agentgym.benchmarks.baselines:NAME``. Each is a plain
function ``messages -> str``; none looks at an environment's state.

* :func:`guess_zero`: answers every maths problem with ``\\boxed{0}``. Right only when
  the answer happens to be 0: the floor of ``math-balanced``.
* :func:`verbose_guess_zero`: the same guess after ~300 tokens of filler. Same accuracy
  as :func:`guess_zero`, many more tokens: the balanced score must rank it lower or
  equal, never higher.
* :func:`forgetful`: replies ``OK.`` to everything, so it never answers a question
  (``memory-recall`` floor).
* :func:`hoarder`: on every turn lists *every* locker code it can see, asked or not,
  newest first. Its summaries overflow the memory limit and are cut, losing the oldest
  codes, so it remembers only part of what it needs: a middle rung on ``memory-recall``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agentgym.types import Message

_FACT = re.compile(r"(?:The code of )?locker (\d+)\s*(?:is|:|=)\s*(\d{4})", re.IGNORECASE)

_FILLER = (
    "Let me think about this problem carefully. I will restate the question, consider "
    "several approaches, and check each step before committing to an answer. "
)


def guess_zero(messages: Sequence[Message]) -> str:
    """Answer ``\\boxed{0}`` to everything."""
    return "The answer is \\boxed{0}."


def verbose_guess_zero(messages: Sequence[Message]) -> str:
    """Pad with about 300 tokens of filler, then answer ``\\boxed{0}``."""
    return _FILLER * 8 + "Final answer: \\boxed{0}."


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
