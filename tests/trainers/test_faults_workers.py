"""A Ray env worker stopped with SIGSTOP in the middle of a rollout.

The trainer's :class:`~agentgym.health.WorkerMonitor` polls the real actors; the
stopped one stops answering, is named hung (worker, host, pid) within seconds, its
``/proc`` state is dumped, and it is replaced; the episodes it held fail with
``worker_lost`` and are played again with the same seeds, so the rollout equals one
without the fault.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from agentgym.health import DetectorSettings, WorkerMonitor
from agentgym.health.procs import alive
from agentgym.policies import ScriptedPolicy
from agentgym.rollouts import rollout
from agentgym.workers import RayEnvWorkers

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")


@pytest.fixture(scope="module")
def workers():
    w = RayEnvWorkers(
        2, num_cpus=2, cpus_per_worker=0.5, object_store_memory=100 * 1024**2, max_concurrency=8
    )
    yield w
    w.close()


async def _count_then_stop(messages):
    await asyncio.sleep(0.2)  # a slow policy keeps the episodes in flight for seconds
    said = sum(1 for m in messages if m.role == "assistant")
    return "next" if said < 2 else "done"


def _content(ep):
    d = ep.to_dict()
    d["metrics"] = {}
    return d


@pytest.mark.slow
def test_a_stopped_worker_is_named_replaced_and_its_episodes_replayed(workers, tmp_path):
    from toy_envs import CounterEnv

    policy = ScriptedPolicy(_count_then_stop)
    kw = dict(seeds=list(range(6)), group_size=2, concurrency=12)
    clean = rollout(lambda: CounterEnv(target=5), policy, **kw)

    settings = DetectorSettings(hung_after_s=3.0)
    monitor = WorkerMonitor(
        workers, settings, action="replace", run_dir=tmp_path, interval_s=0.5, rank=0
    )
    victim = {i["index"]: i["pid"] for i in workers.info()}[1]
    replaced = workers.replaced
    result = {}

    def play():
        result["episodes"] = rollout(
            lambda: CounterEnv(target=5), policy, env_host=workers, retries=1, **kw
        )

    player = threading.Thread(target=play)
    try:
        player.start()
        time.sleep(0.5)  # the episodes are leased and stepping
        os.kill(victim, signal.SIGSTOP)
        stopped = time.monotonic()
        player.join(timeout=120)
        took = time.monotonic() - stopped
    finally:
        monitor.close()
        if alive(victim):
            os.kill(victim, signal.SIGKILL)
    assert not player.is_alive()
    (fault,) = monitor.faults
    assert (fault.kind, fault.worker, fault.pid) == ("hung", "worker1", victim)
    assert fault.host == socket.gethostname() and "no heartbeat" in fault.reason
    assert took < 30
    assert workers.replaced == replaced + 1 and monitor.replaced == 1
    deadline = time.monotonic() + 10
    while alive(victim) and time.monotonic() < deadline:  # the stopped process is gone
        time.sleep(0.1)
    assert not alive(victim)
    (row,) = [json.loads(line) for line in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert row["event"] == "worker_fault" and row["action"] == "replace"
    assert "T (stopped)" in Path(row["dump"]).read_text()
    episodes = result["episodes"]
    assert not any(e.failed for e in episodes)
    lost = {r for e in episodes for r in e.metrics.get("rollout/failed_attempts", [])}
    assert lost == {"worker_lost"}  # some were on the stopped worker, and were replayed
    assert [_content(e) for e in episodes] == [_content(e) for e in clean]
