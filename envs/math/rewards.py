"""Rewards of BalancedMath: a correctness reward plus (minus) a token cost.

``reward = correctness + penalty``, where

* ``correctness`` is ``correct_reward`` (default 1) or ``incorrect_reward`` (default 0;
  ``reward_scheme="signed"`` makes it DAPO's -1);
* ``penalty <= 0`` comes from one selectable token cost, on ``n`` = the tokens the policy
  generated in the episode (every reply, summaries included), counted with the env's
  ``count_tokens``:

  ============  ===========================================================  ============
  token_cost    penalty                                                      applies to
  ============  ===========================================================  ============
  ``none``      0                                                            --
  ``linear``    ``-lambda * n / budget``                                     correct
  ``target``    ``-alpha * |n - target|`` (L1/LCPO)                          correct
  ``overlong``  DAPO soft overlong: 0 for ``n <= L_max - L_cache``, then     all
                ``(L_max - L_cache - n) / L_cache`` down to -1 at ``L_max``,
                -1 beyond
  ============  ===========================================================  ============

  "applies to" is the default of ``token_cost_on``: the linear and target costs charge
  only correct answers, so a wrong answer is never made *better* by stopping early
  (the model should stop padding, not stop thinking); DAPO's overlong shaping charges
  every reply, as in the paper. ``token_cost_on="all"``/``"correct"`` overrides it.

Group-relative length rewards (Kimi k1.5) need the whole group of samples and belong in
the trainer; the breakdown carries what they need per episode (``correct``,
``response_tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentgym import ConfigError, UnknownNameError

__all__ = ["REWARD_SCHEMES", "TOKEN_COSTS", "RewardConfig"]

REWARD_SCHEMES = {"binary": (1.0, 0.0), "signed": (1.0, -1.0)}
TOKEN_COSTS = ("none", "linear", "target", "overlong")
_DEFAULT_ON = {"none": "all", "linear": "correct", "target": "correct", "overlong": "all"}


@dataclass(frozen=True)
class RewardConfig:
    """How an episode is rewarded (see the module docstring).

    Attributes:
        reward_scheme: ``"binary"`` (1/0) or ``"signed"`` (DAPO's +1/-1).
        correct_reward / incorrect_reward: override the scheme's values.
        token_cost: ``"none"``, ``"linear"``, ``"target"`` or ``"overlong"``.
        token_cost_on: ``"correct"`` or ``"all"``; ``None`` picks the cost's default.
        max_response_tokens: L_max of the overlong cost and the default linear budget.
        linear_lambda: lambda of the linear cost.
        linear_budget: the linear cost's denominator (``None``: ``max_response_tokens``).
        target_tokens: the target length of the target cost (required for it).
        target_alpha: alpha of the target cost, per token.
        overlong_cache: L_cache of the overlong cost (``None``: a quarter of L_max).
    """

    reward_scheme: str = "binary"
    correct_reward: float | None = None
    incorrect_reward: float | None = None
    token_cost: str = "none"
    token_cost_on: str | None = None
    max_response_tokens: int = 1024
    linear_lambda: float = 0.1
    linear_budget: int | None = None
    target_tokens: int | None = None
    target_alpha: float = 0.001
    overlong_cache: int | None = None

    def __post_init__(self) -> None:
        if self.reward_scheme not in REWARD_SCHEMES:
            raise UnknownNameError("reward_scheme", self.reward_scheme, REWARD_SCHEMES)
        if self.token_cost not in TOKEN_COSTS:
            raise UnknownNameError(
                "token_cost",
                self.token_cost,
                TOKEN_COSTS,
                hint="Token costs: none, linear (lambda*n/budget), target (alpha*|n-target|),"
                " overlong (DAPO).",
            )
        if self.token_cost_on not in (None, "correct", "all"):
            raise ConfigError(
                f"token_cost_on must be 'correct', 'all' or None, got {self.token_cost_on!r}."
            )
        _positive_int("max_response_tokens", self.max_response_tokens)
        if self.linear_budget is not None:
            _positive_int("linear_budget", self.linear_budget)
        if self.linear_lambda < 0 or self.target_alpha < 0:
            raise ConfigError(
                "linear_lambda and target_alpha must be >= 0 (they are subtracted), got "
                f"{self.linear_lambda} and {self.target_alpha}."
            )
        if self.token_cost == "target" and self.target_tokens is None:
            raise ConfigError(
                "token_cost='target' needs target_tokens (the length to aim for), e.g. "
                "target_tokens=256."
            )
        if self.target_tokens is not None and self.target_tokens < 0:
            raise ConfigError(f"target_tokens must be >= 0, got {self.target_tokens}.")
        if (
            self.overlong_cache is not None
            and not 0 < self.overlong_cache <= self.max_response_tokens
        ):
            raise ConfigError(
                f"overlong_cache must be in 1..max_response_tokens ({self.max_response_tokens}),"
                f" got {self.overlong_cache}."
            )
        for name in ("correct_reward", "incorrect_reward"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, int | float):
                raise ConfigError(f"{name} must be a number, got {v!r}.")
        if self.correct_value <= self.incorrect_value:
            raise ConfigError(
                f"correct_reward ({self.correct_value}) must be larger than incorrect_reward "
                f"({self.incorrect_value})."
            )

    @property
    def correct_value(self) -> float:
        base = REWARD_SCHEMES[self.reward_scheme][0]
        return float(base if self.correct_reward is None else self.correct_reward)

    @property
    def incorrect_value(self) -> float:
        base = REWARD_SCHEMES[self.reward_scheme][1]
        return float(base if self.incorrect_reward is None else self.incorrect_reward)

    @property
    def cost_on(self) -> str:
        return self.token_cost_on or _DEFAULT_ON[self.token_cost]

    @property
    def cache(self) -> int:
        return self.overlong_cache or max(1, self.max_response_tokens // 4)

    def penalties(self, tokens: int) -> dict[str, float]:
        """Every cost term for ``tokens`` generated tokens (<= 0; inactive terms are 0)."""
        out = {"penalty_linear": 0.0, "penalty_target": 0.0, "penalty_overlong": 0.0}
        if self.token_cost == "linear":
            budget = self.linear_budget or self.max_response_tokens
            out["penalty_linear"] = -self.linear_lambda * tokens / budget
        elif self.token_cost == "target":
            target = self.target_tokens or 0
            out["penalty_target"] = -self.target_alpha * abs(tokens - target)
        elif self.token_cost == "overlong":
            l_max, l_cache = self.max_response_tokens, self.cache
            if tokens <= l_max - l_cache:
                value = 0.0
            elif tokens <= l_max:
                value = ((l_max - l_cache) - tokens) / l_cache
            else:
                value = -1.0
            out["penalty_overlong"] = value
        return {k: (v if v != 0 else 0.0) for k, v in out.items()}  # no -0.0

    def score(self, correct: bool, tokens: int) -> tuple[float, dict[str, Any]]:
        """The reward and its terms for one episode."""
        correctness = self.correct_value if correct else self.incorrect_value
        terms = self.penalties(tokens)
        applies = self.cost_on == "all" or correct
        if not applies:
            terms = dict.fromkeys(terms, 0.0)
        penalty = sum(terms.values())
        reward = correctness + penalty
        return reward, {
            "correctness_reward": correctness,
            "token_cost": self.token_cost,
            "token_cost_applied": bool(applies and self.token_cost != "none"),
            "token_penalty": penalty,
            **terms,
        }


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}.")
