"""Leaderboard benchmarks: frozen suites, a resumable runner, a leaderboard, a perf suite.

* :mod:`~agentgym.benchmarks.suites`: :class:`Suite` definitions, their content hash,
  the built-in suites ``math-balanced``, ``memory-recall`` and ``appgen``.
* :mod:`~agentgym.benchmarks.runner`: :func:`run_suite` runs (or resumes) a suite with
  a policy and writes ``episodes.jsonl`` and ``result.json``.
* :mod:`~agentgym.benchmarks.metrics`: avg@k, pass@k, tokens, the balanced score,
  bootstrap confidence intervals over tasks.
* :mod:`~agentgym.benchmarks.leaderboard`: a Markdown table and a self-contained HTML
  page from a folder of results.
* :mod:`~agentgym.benchmarks.baselines`: weak scripted policies to rank against.
* :mod:`~agentgym.benchmarks.perf`: the performance report (``agentgym bench perf``).

Benchmarks reach environments only through registered ids (``gym.make``).
"""

from __future__ import annotations

from agentgym import lazy_exports
from agentgym.benchmarks.suites import (
    SCORING_VERSION,
    Suite,
    SuiteEntry,
    get_suite,
    register_suite,
    suite_names,
)

#: the runner and the leaderboard pull in more: loaded on first use
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "run_suite": "agentgym.benchmarks.runner",
        "run_suite_async": "agentgym.benchmarks.runner",
        "build_leaderboard": "agentgym.benchmarks.leaderboard",
        "collect_results": "agentgym.benchmarks.leaderboard",
    },
)


__all__ = [
    "SCORING_VERSION",
    "Suite",
    "SuiteEntry",
    "build_leaderboard",
    "collect_results",
    "get_suite",
    "register_suite",
    "run_suite",
    "run_suite_async",
    "suite_names",
]
