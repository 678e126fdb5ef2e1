"""Benchmark metrics with confidence intervals over tasks.

Every metric is the mean, over tasks, of a per-task value computed from that task's k
samples, so one method gives every interval: a percentile **bootstrap over tasks**
(tasks resampled with replacement, each task keeping all its samples; 2,000 resamples
from a fixed seed, so the same episodes always give the same interval). Resampling
tasks rather than episodes treats the k samples of one task as the correlated cluster
they are. The standard error over tasks is reported next to it.

Per-task values (``n`` samples of a task, ``c`` of them successes):

* ``accuracy`` (avg@k) and ``pass_rate``: ``c / n``.
* ``pass_at_k``: the unbiased estimator ``1 - C(n - c, k) / C(n, k)`` (Chen et al.,
  2021); with ``n == k`` it is 1 when any sample succeeded.
* ``mean_tokens``: mean tokens the policy generated per episode (all turns).
* ``reward``: mean environment reward.
* ``test_fraction``: mean share of tests passed (environments that report tests).
* ``balanced``: mean of ``success * efficiency(tokens)`` with
  ``efficiency(t) = 1`` for ``t <= T_ref``, ``0`` for ``t >= T_max`` and
  ``1 - log(t / T_ref) / log(T_max / T_ref)`` in between (see docs/benchmarks.md for
  the reasons behind this choice).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentgym import ConfigError, Episode, episode_accuracy, episode_tokens

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95


def episode_prompt_tokens(ep: Episode) -> int:
    """Prompt tokens over every turn, where the policy reported them (0 otherwise)."""
    return sum(int(t.completion.prompt_tokens or 0) for t in ep.turns)


def tests_counts(ep: Episode) -> tuple[int, int] | None:
    """``(passed, total)`` from a breakdown that reports tests, else None."""
    b = ep.reward_breakdown
    for passed_key, total_key in (
        ("tests_passed", "tests_total"),
        ("passed", "total"),
        ("num_passed", "num_tests"),
    ):
        if passed_key in b and total_key in b:
            try:
                return int(b[passed_key]), int(b[total_key])
            except (TypeError, ValueError):
                return None
    tests = b.get("tests")
    if isinstance(tests, Mapping) and "passed" in tests and "total" in tests:
        return int(tests["passed"]), int(tests["total"])
    return None


def success(ep: Episode, rule: str) -> bool:
    """Whether an episode counts as solved under a suite's success rule.

    Rules:
        ``correct``: the env's own correctness (:func:`agentgym.episode_accuracy`) is
            full: ``reward_breakdown["correct"]`` is true (maths: the final answer is
            right, whatever the token cost did to the reward), or counts every part.
        ``full_reward``: the reward is at least 1 (within 1e-9).
        ``all_tests``: every test passed (at least one test ran).
    """
    if rule == "correct":
        return (episode_accuracy(ep) or 0.0) >= 1.0 - 1e-9
    if rule == "full_reward":
        return ep.reward >= 1.0 - 1e-9
    if rule == "all_tests":
        counts = tests_counts(ep)
        return counts is not None and counts[1] > 0 and counts[0] == counts[1]
    raise ConfigError(f"Unknown success rule {rule!r}; use correct, full_reward or all_tests.")


def efficiency(tokens: float, reference_tokens: float, max_credit_tokens: float) -> float:
    """1 up to ``reference_tokens``, 0 from ``max_credit_tokens``, log-linear in between."""
    if tokens <= reference_tokens:
        return 1.0
    if tokens >= max_credit_tokens:
        return 0.0
    return 1.0 - math.log(tokens / reference_tokens) / math.log(
        max_credit_tokens / reference_tokens
    )


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` successes (k is capped at n)."""
    k = min(k, n)
    if n == 0:
        return 0.0
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass
class TaskOutcome:
    """The samples of one task and what they scored."""

    task: str
    entry: str
    env_id: str
    seed: int
    task_id: str = ""
    successes: list[bool] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    test_fractions: list[float] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.successes)

    def add(self, ep: Episode, rule: str) -> None:
        self.task_id = self.task_id or ep.task_id
        self.successes.append(success(ep, rule))
        self.rewards.append(float(ep.reward))
        self.tokens.append(episode_tokens(ep))
        counts = tests_counts(ep)
        if counts is not None:
            self.test_fractions.append(counts[0] / counts[1] if counts[1] else 0.0)

    def value(self, metric: str, k: int, reference_tokens: int, max_credit_tokens: int) -> float:
        """This task's contribution to ``metric`` (see the module docstring)."""
        if self.n == 0:
            raise ConfigError(f"Task {self.task} has no episodes; nothing to score.")
        if metric in ("accuracy", "pass_rate"):
            return sum(self.successes) / self.n
        if metric == "pass_at_k":
            return pass_at_k(self.n, sum(self.successes), k)
        if metric == "mean_tokens":
            return sum(self.tokens) / self.n
        if metric == "reward":
            return sum(self.rewards) / self.n
        if metric == "test_fraction":
            return sum(self.test_fractions) / len(self.test_fractions) if self.test_fractions else 0
        if metric == "balanced":
            return (
                sum(
                    float(s) * efficiency(t, reference_tokens, max_credit_tokens)
                    for s, t in zip(self.successes, self.tokens, strict=True)
                )
                / self.n
            )
        raise ConfigError(f"Unknown metric {metric!r}.")

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "entry": self.entry,
            "env_id": self.env_id,
            "seed": self.seed,
            "task_id": self.task_id,
            "samples": self.n,
            "successes": sum(self.successes),
            "rewards": self.rewards,
            "tokens": self.tokens,
        }


def mean_with_ci(
    values: Sequence[float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """Mean of per-task values with a percentile-bootstrap interval and the standard error."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:  # nothing scored yet: None (JSON null) rather than NaN
        return {"value": None, "ci_low": None, "ci_high": None, "stderr": None, "n": 0}
    mean = float(x.mean())
    if n == 1:
        return {"value": mean, "ci_low": mean, "ci_high": mean, "stderr": 0.0, "n": 1}
    rng = np.random.default_rng(seed)
    boot = x[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boot, [alpha, 1.0 - alpha])
    return {
        "value": mean,
        # clamp: float rounding in the resample means can land a hair outside the mean
        "ci_low": min(float(lo), mean),
        "ci_high": max(float(hi), mean),
        "stderr": float(x.std(ddof=1) / math.sqrt(n)),
        "n": n,
    }


def compute_metrics(
    outcomes: Iterable[TaskOutcome],
    metrics: Sequence[str],
    *,
    k: int,
    reference_tokens: int,
    max_credit_tokens: int,
) -> dict[str, dict[str, Any]]:
    """``{metric: {value, ci_low, ci_high, stderr, n}}`` over the tasks with episodes."""
    tasks = [t for t in outcomes if t.n > 0]
    return {
        m: mean_with_ci([t.value(m, k, reference_tokens, max_credit_tokens) for t in tasks])
        for m in metrics
    }


def metric_label(metric: str, k: int) -> str:
    """How a metric is shown to people (``avg@4``, ``pass@4``, ...)."""
    return {
        "accuracy": f"accuracy (avg@{k})",
        "pass_rate": f"pass rate (avg@{k})",
        "pass_at_k": f"pass@{k}",
        "mean_tokens": "mean tokens",
        "balanced": "balanced score",
        "reward": "mean reward",
        "test_fraction": "tests passed",
    }.get(metric, metric)


#: Metrics where lower is better (the leaderboard sorts these ascending).
LOWER_IS_BETTER = frozenset({"mean_tokens"})
