"""BalancedMath: maths problems rewarded for a correct answer with few reasoning tokens.

* :func:`grade` -- robust, time-bounded answer checking (math-verify + sympy, extended).
* :class:`BalancedMathEnv` -- the environment ``agentgym/BalancedMath-v0``.
* :mod:`~agentgym.envs.math.generator` -- procedural problems with worked solutions.
* :mod:`~agentgym.envs.math.sources` -- JSONL/Parquet loaders and the bundled hard set.
* :mod:`~agentgym.envs.math.rewards` -- correctness rewards and token costs.

See docs/envs/balanced_math.md.
"""

from __future__ import annotations

from typing import Any

from agentgym.envs.math.grading import DEFAULT_TIMEOUT_S, GradeResult, grade, normalize_gold

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "BalancedMathEnv",
    "GradeResult",
    "Problem",
    "generate",
    "grade",
    "normalize_gold",
]


def __getattr__(name: str) -> Any:
    # the env and the generator import gymnasium/sympy; load them on first use
    if name == "BalancedMathEnv":
        from agentgym.envs.math.env import BalancedMathEnv

        return BalancedMathEnv
    if name in ("Problem", "generate"):
        from agentgym.envs.math import generator

        return getattr(generator, name)
    raise AttributeError(f"module 'agentgym.envs.math' has no attribute {name!r}")
