"""LongTail: a reply whose right length is drawn from a heavy-tailed law (the trainer's
long-tail workload: most replies short, a few near the length cap)."""

from __future__ import annotations

import math
import string
from typing import Any

from agentgym import ActResult, ConfigError, ConversationEnv, Task

LETTERS = frozenset(string.ascii_lowercase)


class LongTailEnv(ConversationEnv):
    """Write as many letters as the task asks, where that number is heavy-tailed.

    ## Description
    Each task draws a target length ``k`` from a discrete Pareto law,
    ``k = min(max_length, floor(min_length * u ** (-1 / alpha)))`` with ``u`` uniform in
    ``(0, 1]``: with the defaults half the tasks ask for at most 7 letters, two thirds
    for at most 10, and about one in seventy for 200 or more (mean 17.6). The right reply is ``k`` lowercase letters. The workload
    exists to measure what an all-sync RL step loses to its longest reply (decode
    utilization, tail share; ``benchmarks/perf/longtail.py``): a policy that follows
    the task writes replies whose lengths follow the same heavy-tailed law as the reasoning
    lengths of real models, where most replies are short and a few run to the cap.

    ## Action
    Any text; the reply is judged on its characters after stripping surrounding
    whitespace.

    ## Observation
    One user message. With ``ruler`` (the default) the length is shown as a row of ``k``
    dots ("as many letters as there are dots"), which a small model can learn to match
    by comparing counts; without it the number is written in digits.

    ## Rewards
    Terminal only: ``length_score * letter_share`` where ``length_score = max(0, 1 -
    |n - k| / k)`` for a reply of ``n`` characters and ``letter_share`` is the share of
    those characters that are lowercase letters ``a``-``z`` (0 for an empty reply).
    ``reward_breakdown``: ``target``, ``length``, ``length_score``, ``letter_share``,
    ``correct`` (exactly ``k`` characters, all letters).

    ## Episode end
    Terminated after the first reply (one turn).

    ## Arguments
    * ``min_length`` (4): the smallest target, the law's scale.
    * ``max_length`` (256): the largest target (the law is cut there; match it to the
      trainer's ``rollout.max_tokens``).
    * ``alpha`` (1.1): the tail index; smaller is heavier (below 1 the uncut law has no
      mean).
    * ``ruler`` (true): show the length as dots instead of digits.
    * ``count_tokens``, ``render_mode``: see :class:`~agentgym.env.ConversationEnv`.

    ## Version history
    * v0: first version.
    """

    def __init__(
        self,
        min_length: int = 4,
        max_length: int = 256,
        alpha: float = 1.1,
        ruler: bool = True,
        **kwargs: Any,
    ) -> None:
        if not 1 <= min_length <= max_length:
            raise ConfigError(
                f"LongTail needs 1 <= min_length <= max_length; got {min_length}, {max_length}."
            )
        if not alpha > 0:
            raise ConfigError(f"LongTail's alpha must be > 0, got {alpha}.")
        kwargs["max_turns"] = 1
        super().__init__(**kwargs)
        self.min_length, self.max_length = int(min_length), int(max_length)
        self.alpha, self.ruler = float(alpha), bool(ruler)
        self._target = 0
        self._reply = ""

    def target_length(self, u: float) -> int:
        """The target for a uniform draw ``u`` in ``(0, 1]`` (the law's inverse CDF)."""
        return min(self.max_length, math.floor(self.min_length * u ** (-1.0 / self.alpha)))

    def _begin(self, seed: int | None, options: dict[str, Any] | None) -> Task:
        u = 1.0 - float(self.np_random.random())  # in (0, 1]
        self._target = self.target_length(u)
        self._reply = ""
        if self.ruler:
            prompt = (
                "Reply with lowercase letters only, exactly as many as there are dots "
                f"here: {'.' * self._target}"
            )
        else:
            prompt = f"Reply with exactly {self._target} lowercase letters and nothing else."
        return Task(task_id=f"longtail/{self._target}/{seed}", prompt=prompt)

    def _act(self, action: str) -> ActResult:
        self._reply = action.strip()
        return ActResult(done=True)

    def _score(self, end_reason: str) -> tuple[float, dict[str, Any]]:
        k, n = self._target, len(self._reply)
        length_score = max(0.0, 1.0 - abs(n - k) / k)
        letters = sum(c in LETTERS for c in self._reply) / n if n else 0.0
        return length_score * letters, {
            "target": k,
            "length": n,
            "length_score": length_score,
            "letter_share": letters,
            "correct": n == k and letters == 1.0,
        }

    def oracle_action(self, observation: Any) -> str:
        return "a" * self._target
