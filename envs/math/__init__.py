"""BalancedMath: maths problems rewarded for a correct answer with few reasoning tokens.

* :func:`grade` -- robust, time-bounded answer checking (math-verify + sympy, extended);
  :func:`warm_up` / :func:`get_pool` start and return the grading process pool.
* :class:`BalancedMathEnv` -- the environment ``agentgym/BalancedMath-v0``;
  :class:`BalancedMathConfig` -- its settings (groups :class:`MathProblems`,
  :class:`MathAnswers`, :class:`RewardConfig`, :class:`MathLimits`).
* :func:`generate` -- procedural problems with worked solutions, of the :data:`KINDS`
  and :data:`LEVELS` of the package :mod:`~agentgym.envs.math.generator` (one module per
  problem family).
* :mod:`~agentgym.envs.math.sources` -- JSONL/Parquet loaders and the bundled hard set.
* :mod:`~agentgym.envs.math.rewards` -- correctness rewards and token costs.

See docs/envs/balanced_math.md.
"""

from __future__ import annotations

from typing import Any

from agentgym.envs.math.grading import DEFAULT_TIMEOUT_S, GradeResult, grade, normalize_gold
from agentgym.envs.math.pool import get_pool, warm_up

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "KINDS",
    "LEVELS",
    "BalancedMathConfig",
    "BalancedMathEnv",
    "GradeResult",
    "MathAnswers",
    "MathLimits",
    "MathProblems",
    "Problem",
    "RewardConfig",
    "generate",
    "get_pool",
    "grade",
    "normalize_gold",
    "warm_up",
]

#: names loaded on first use (the env and the generator import gymnasium/sympy)
_GENERATOR_NAMES = ("KINDS", "LEVELS", "Problem", "generate")
_CONFIG_NAMES = ("BalancedMathConfig", "MathAnswers", "MathLimits", "MathProblems")


def __getattr__(name: str) -> Any:
    if name == "BalancedMathEnv":
        from agentgym.envs.math.env import BalancedMathEnv

        return BalancedMathEnv
    if name in _CONFIG_NAMES:
        import agentgym.envs.math.config as config

        return getattr(config, name)
    if name == "RewardConfig":
        from agentgym.envs.math.rewards import RewardConfig

        return RewardConfig
    if name in _GENERATOR_NAMES:
        import agentgym.envs.math.generator as generator

        return getattr(generator, name)
    raise AttributeError(f"module 'agentgym.envs.math' has no attribute {name!r}")
