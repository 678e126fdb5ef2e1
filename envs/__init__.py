"""Concrete agentgym environments.

This module holds only the registration table: ids, string entry points and default
arguments. Importing it imports no environment code; each env module is imported by
Gymnasium when the env is made. ``import agentgym`` registers every row.
"""

from __future__ import annotations

from typing import Any

#: One row per environment: ``id``, ``entry_point`` ("module:Class") and optional
#: ``kwargs`` (defaults passed to the constructor) and ``nondeterministic``.
ENV_SPECS: tuple[dict[str, Any], ...] = (
    {
        "id": "agentgym/MemoryRecall-v0",
        "entry_point": "agentgym.envs.memory_recall:MemoryRecallEnv",
    },
    {
        "id": "agentgym/BalancedMath-v0",
        "entry_point": "agentgym.envs.math.env:BalancedMathEnv",
    },
    {
        "id": "agentgym/AppGen-v0",
        "entry_point": "agentgym.envs.appgen.env:AppGenEnv",
    },
    {
        "id": "agentgym/LongTail-v0",
        "entry_point": "agentgym.envs.longtail:LongTailEnv",
    },
)
