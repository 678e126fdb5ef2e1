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

from agentgym.benchmarks.suites import (
    SCORING_VERSION,
    Suite,
    SuiteEntry,
    get_suite,
    register_suite,
    suite_names,
)


def __getattr__(name: str):
    # the runner and leaderboard pull in more; load them on first use
    if name in ("run_suite", "run_suite_async"):
        from agentgym.benchmarks import runner

        return getattr(runner, name)
    if name in ("build_leaderboard", "collect_results"):
        from agentgym.benchmarks import leaderboard

        return getattr(leaderboard, name)
    raise AttributeError(f"module 'agentgym.benchmarks' has no attribute {name!r}")


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
