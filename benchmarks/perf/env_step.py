"""Env step overhead: what ``agentgym.rollout`` costs on top of a bare ``env.step`` loop.

The same episodes (``agentgym/MemoryRecall-v0``, seeds ``0..N-1``, a scripted policy
that replies ``OK.`` instantly, so that the environment and the harness are all that is
timed) are played three ways:

* **direct**: ``gym.make`` once, then ``reset`` / ``step`` in a plain Python loop;
* **rollout, 1 in flight**: :func:`agentgym.rollout` with ``concurrency=1`` (asyncio
  loop, env work in a thread pool, a Turn record per step);
* **rollout, 8 in flight**: the same with ``concurrency=8``.

Ratios: ``rollout_overhead_x`` = rollout (1 in flight) time per step / direct time per
step (1.0 means no overhead); ``rollout_c8_vs_direct_throughput_x`` = direct time per
step / rollout (8 in flight) time per step (above 1 means concurrency pays even for an
environment this cheap; with CPU-bound envs and the GIL it may not).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

ENV_ID = "agentgym/MemoryRecall-v0"


def _reply(messages: Any) -> str:
    return "OK."


def _make_ms() -> float:
    import gymnasium as gym

    import agentgym  # noqa: F401

    t0 = time.perf_counter()
    env = gym.make(ENV_ID)
    ms = 1e3 * (time.perf_counter() - t0)
    env.close()
    return ms


def _direct(n: int) -> tuple[float, int]:
    import gymnasium as gym

    import agentgym  # noqa: F401

    env = gym.make(ENV_ID)
    steps = 0
    t0 = time.perf_counter()
    for seed in range(n):
        env.reset(seed=seed)
        done = False
        while not done:
            _obs, _r, term, trunc, _info = env.step("OK.")
            steps += 1
            done = term or trunc
    elapsed = time.perf_counter() - t0
    env.close()
    return elapsed, steps


def _rollout(n: int, concurrency: int) -> tuple[float, int]:
    from agentgym import ScriptedPolicy, rollout

    policy = ScriptedPolicy(_reply)
    t0 = time.perf_counter()
    eps = rollout(ENV_ID, policy, seeds=range(n), concurrency=concurrency)
    elapsed = time.perf_counter() - t0
    return elapsed, sum(len(e.turns) for e in eps)


def run(quick: bool = False) -> dict[str, Any]:
    """Time the three ways (see the module docstring); returns ratios and figures."""
    n = 30 if quick else 300
    _direct(3)  # warm imports and caches
    d_s, d_steps = _direct(n)
    r1_s, r1_steps = _rollout(n, 1)
    r8_s, r8_steps = _rollout(n, 8)
    direct_us = 1e6 * d_s / d_steps
    r1_us = 1e6 * r1_s / r1_steps
    r8_us = 1e6 * r8_s / r8_steps
    return {
        "title": "env step overhead of agentgym.rollout vs a bare gym loop",
        "ratios": {
            "rollout_overhead_x": r1_us / direct_us,
            "rollout_c8_vs_direct_throughput_x": direct_us / r8_us,
        },
        "figures": {
            "episodes": n,
            "steps": d_steps,
            "direct_step_us": direct_us,
            "rollout_c1_step_us": r1_us,
            "rollout_c8_step_us": r8_us,
            "make_ms": _make_ms(),
        },
        "notes": (
            f"{ENV_ID}, {n} episodes, instant scripted policy ('OK.'). Step counts agree "
            f"across the three ways: {d_steps}, {r1_steps}, {r8_steps}. The direct loop makes "
            "its env before the clock starts; the rollouts' times include making theirs "
            "(1 or 8 envs, make_ms each)."
        ),
    }


def main() -> int:
    quick = "--quick" in sys.argv or os.environ.get("AGENTGYM_PERF_QUICK") == "1"
    res = run(quick=quick)
    print(res["title"])
    for k, v in {**res["ratios"], **res["figures"]}.items():
        print(f"  {k}: {v:.3f}" if isinstance(v, float) else f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
