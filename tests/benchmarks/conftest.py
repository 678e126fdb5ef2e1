"""Fixtures for the benchmark tests: a tiny MemoryRecall suite and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym.benchmarks.suites import Suite, SuiteEntry

HERE = Path(__file__).resolve().parent
ORACLE = "oracle"
HOARDER = "scripted:agentgym.benchmarks.baselines:hoarder"
FORGETFUL = "scripted:agentgym.benchmarks.baselines:forgetful"


def make_tiny_suite(name: str = "memory-mini", seeds: int = 3, k: int = 2) -> Suite:
    """Two MemoryRecall entries, ``seeds`` tasks each, ``k`` samples per task."""
    return Suite(
        name=name,
        version=1,
        description="tiny MemoryRecall suite for tests",
        entries=(
            SuiteEntry("default", "agentgym/MemoryRecall-v0", tuple(range(seeds))),
            SuiteEntry(
                "long",
                "agentgym/MemoryRecall-v0",
                tuple(range(100, 100 + seeds)),
                {"num_facts": 4, "num_distractors": 20, "chunk_size": 3},
            ),
        ),
        samples_per_task=k,
        max_tokens=256,
        metrics=("reward", "accuracy", "pass_at_k", "mean_tokens"),
        primary_metric="reward",
        plot_metric="reward",
        success="full_reward",
    )


@pytest.fixture
def tiny_suite() -> Suite:
    return make_tiny_suite()


@pytest.fixture
def tiny_suite_file(tmp_path: Path) -> Path:
    import json

    path = tmp_path / "memory-mini.json"
    path.write_text(json.dumps(make_tiny_suite().to_dict()))
    return path


def run_cli(*args: str, timeout: float = 300, env: dict | None = None):
    """``python -m agentgym ARGS`` with tests/benchmarks on PYTHONPATH."""
    pythonpath = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]).strip(os.pathsep)
    return subprocess.run(
        [sys.executable, "-m", "agentgym", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": pythonpath, **(env or {})},
    )


@pytest.fixture
def cli():
    """Run the agentgym CLI in a subprocess (see :func:`run_cli`)."""
    return run_cli


@pytest.fixture
def suite_factory():
    """:func:`make_tiny_suite`, for tests that need a differently sized suite."""
    return make_tiny_suite


@pytest.fixture
def specs() -> dict[str, str]:
    """Policy specs of the three memory-recall tiers."""
    return {"oracle": ORACLE, "hoarder": HOARDER, "forgetful": FORGETFUL}
