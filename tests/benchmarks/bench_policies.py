"""Scripted policies the benchmark tests load by spec (``scripted:bench_policies:NAME``)."""

from __future__ import annotations

import asyncio
import os

from agentgym.benchmarks.baselines import hoarder

#: seconds each call of :func:`slow_hoarder` waits (a stand-in for a model's latency)
DELAY = float(os.environ.get("BENCH_TEST_DELAY", "0.05"))


async def slow_hoarder(messages):
    """The hoarder baseline, made slow so a test can kill a run half-way."""
    await asyncio.sleep(DELAY)
    return hoarder(messages)
