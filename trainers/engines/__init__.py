"""Rollout engines: batched generation behind one interface (see :mod:`.base`)."""

from __future__ import annotations

from agentgym.trainers.engines.base import BatchingPolicy, GenerationRequest, RolloutEngine
from agentgym.trainers.engines.factory import make_engine
from agentgym.trainers.engines.hf import HFEngine
from agentgym.trainers.engines.spec import policy_from_spec

__all__ = [
    "BatchingPolicy",
    "GenerationRequest",
    "HFEngine",
    "RolloutEngine",
    "make_engine",
    "policy_from_spec",
]
