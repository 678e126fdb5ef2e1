"""What one episode says about itself: correctness and tokens, read the same way everywhere.

The trainer's charts, its held-out evaluation and the benchmark scores all ask an episode
the same questions; the answers live here so that they cannot drift apart.

* :func:`episode_accuracy`: the env's own correctness, from
  ``reward_breakdown["correct"]``: a bool (maths: the final answer is right, whatever
  the token cost did to the reward), or a count over ``asked`` / ``total`` (MemoryRecall:
  facts recalled of those asked).
* :func:`episode_solved`: whether the episode counts as a correct one (VAPO's
  positive examples).
* :func:`episode_tokens`: the tokens the policy generated, over every turn of every
  conversation.
* :func:`episode_overlong`: the env cut the episode off by one of its limits (SUPO's
  "overlong": out of conversations, turns or tokens) before its final answer.
* :func:`working_context` / :func:`summary_tokens`: what memory summaries cost and buy:
  the largest prompt of any turn (the context the policy had to hold at once) and the
  tokens written into summaries.
* :func:`retried_reasons`: the failed attempts that :func:`agentgym.rollout` played
  again, by reason (an episode that was scored after a retry still had a failure).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from agentgym.tokens import approx_tokens, count_message_tokens
from agentgym.types import Episode


def episode_accuracy(ep: Episode) -> float | None:
    """The env's correctness of an episode in [0, 1], or ``None`` when it reports none.

    ``reward_breakdown["correct"]`` may be a bool, or a count: then ``asked`` (else
    ``total``) is the denominator; a count without one is returned as it is.
    """
    b = ep.reward_breakdown
    if "correct" not in b:
        return None
    c = b["correct"]
    if isinstance(c, bool):
        return float(c)
    if isinstance(c, int | float):
        denom = b.get("asked", b.get("total"))
        if isinstance(denom, int | float) and not isinstance(denom, bool) and denom > 0:
            return float(c) / float(denom)
        return float(c)
    return None


def episode_solved(ep: Episode) -> bool:
    """Whether the episode solved its task: full :func:`episode_accuracy`, or, for an env
    that reports no correctness, a positive reward."""
    acc = episode_accuracy(ep)
    return acc >= 1.0 if acc is not None else ep.reward > 0


def episode_tokens(ep: Episode) -> int:
    """Tokens the policy generated in the episode, over every turn.

    Uses each completion's ``num_tokens`` (a tokenizer's or an endpoint's count) and
    falls back to :func:`~agentgym.tokens.approx_tokens` of the text where it is missing.
    """
    return sum(_turn_tokens(t) for t in ep.turns)


#: the env limits that cut an episode off before its answer (``reward_breakdown["end_reason"]``)
OVERLONG_END_REASONS = ("max_conversations", "max_turns", "max_total_tokens")


def episode_overlong(ep: Episode) -> bool:
    """Whether the env cut the episode off by a limit (``memory.max_conversations``,
    ``max_turns``, ``max_total_tokens``) before it finished: SUPO's overlong episode.
    An episode that failed for infrastructure reasons is not overlong."""
    if ep.failed or not ep.truncated or ep.terminated:
        return False
    return ep.reward_breakdown.get("end_reason", "max_turns") in OVERLONG_END_REASONS


def working_context(ep: Episode) -> int:
    """The largest prompt, in tokens, of any turn of the episode: the context the policy
    had to hold at once. Uses each completion's ``prompt_tokens`` (the engine's count)
    and falls back to :func:`~agentgym.tokens.count_message_tokens` of the messages (the
    envs' default approximation)."""
    most = 0
    for t in ep.turns:
        n = t.completion.prompt_tokens
        if n is None:
            n = count_message_tokens(t.messages)
        most = max(most, int(n))
    return most


def summary_tokens(ep: Episode) -> int:
    """Tokens the policy wrote in the episode's memory-summary turns."""
    return sum(_turn_tokens(t) for t in ep.turns if t.kind == "summary")


def _turn_tokens(t) -> int:
    n = t.completion.num_tokens
    return int(n) if n is not None else approx_tokens(t.completion.text)


#: where :func:`agentgym.rollout` records an episode's failed attempts before the last
FAILED_ATTEMPTS = "rollout/failed_attempts"


def failed_attempts(ep: Episode) -> list[str]:
    """The reasons of the episode's attempts that failed and were played again."""
    return list(ep.metrics.get(FAILED_ATTEMPTS, ()))


def retried_reasons(episodes: Iterable[Episode]) -> dict[str, int]:
    """The attempts that failed and were played again, counted by reason (most common
    first), over ``episodes`` (scored or failed in the end)."""
    return dict(Counter(r for ep in episodes for r in failed_attempts(ep)).most_common())
