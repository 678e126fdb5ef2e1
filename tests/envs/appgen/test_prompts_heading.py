"""AppGen's task prompt names the task once (issue 22): a spec that starts with its own
title heading does not repeat the prompt's ``# Task:`` heading."""

from __future__ import annotations

import agentgym

from .conftest import sandbox_kwargs


def test_the_task_heading_appears_once(backend):
    env = agentgym.make("agentgym/AppGen-v0", tasks=["bank_ledger"], **sandbox_kwargs(backend))
    try:
        obs, _ = env.reset(seed=0)
    finally:
        env.close()
    text = obs[1].content
    assert text.startswith("# Task: Bank ledger with event sourcing\n")
    assert text.count("Bank ledger with event sourcing") == 1
    assert "Build `ledger`" in text
