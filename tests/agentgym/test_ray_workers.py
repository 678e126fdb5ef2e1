"""RayEnvWorkers: env work in Ray actors, same episodes as in-process, time bounds kept.

One local Ray per test process (module fixture: 2 CPUs, 100 MB object store); Ray's
start-up costs seconds, so every test shares it. Tests assert values and errors only.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import ray

from agentgym.errors import ConfigError, EnvStateError, UnknownNameError
from agentgym.policies import OraclePolicy, ScriptedPolicy
from agentgym.rollouts import rollout
from agentgym.types import Episode, SamplingParams
from agentgym.workers import (
    TMPDIR_ENV,
    EnvWorkerError,
    RayEnvWorkers,
    default_temp_dir,
)

#: one worker under --dist loadgroup: the module's Ray (the ``workers`` fixture, ~6 s to
#: start and stop) starts once, not once per worker
pytestmark = pytest.mark.xdist_group("ray_workers")

REPO = Path(__file__).resolve().parents[2]
RECALL = "agentgym/MemoryRecall-v0"
MATH = "agentgym/BalancedMath-v0"
APPGEN = "agentgym/AppGen-v0"
# numeric answers only, so that every verdict comes from the exact fast path (a symbolic
# verdict could time out on a loaded machine in one run and not in the other)
NUMERIC_MATH = {"kinds": "arithmetic,percentages"}


@pytest.fixture(scope="module")
def workers():
    w = RayEnvWorkers(
        2, num_cpus=2, cpus_per_worker=0.5, object_store_memory=100 * 1024**2, max_concurrency=8
    )
    yield w
    started, session = w.started_ray, w.session_dir
    w.close()
    if started:  # a Ray this object started is gone, and so are its files
        assert not ray.is_initialized()
        assert session is None or not os.path.exists(session)


def _content(ep: Episode) -> dict[str, Any]:
    """An episode without its wall-clock numbers (which differ from run to run)."""
    d = ep.to_dict()
    d["metrics"] = {
        k: v
        for k, v in d["metrics"].items()
        if not (k.startswith("time/") or k.endswith(("_s", "_seconds")))
    }
    return d


def _run(coro):
    return asyncio.run(coro)


# ----------------------------------------------------------------------------- same episodes
@pytest.mark.parametrize(("env_id", "env_kwargs"), [(RECALL, {}), (MATH, {})])
def test_oracle_episodes_are_identical_to_the_in_process_path(workers, env_id, env_kwargs):
    kw = {"seeds": [0, 1, 2], "group_size": 2, "concurrency": 4, "env_kwargs": env_kwargs}
    local = rollout(env_id, OraclePolicy(), **kw)
    remote = rollout(env_id, OraclePolicy(), env_host=workers, **kw)
    assert [_content(e) for e in remote] == [_content(e) for e in local]
    assert all(e.reward == 1.0 for e in remote)  # the oracle really played, in the worker
    assert {"time/env_s", "time/policy_s"} <= set(remote[0].metrics)
    assert min(workers.env_counts()) >= 1  # the envs were spread over both workers


@pytest.mark.parametrize(("env_id", "env_kwargs"), [(RECALL, {}), (MATH, NUMERIC_MATH)])
def test_driver_side_policy_with_seeded_sampling_gives_identical_episodes(
    workers, env_id, env_kwargs
):
    policy = ScriptedPolicy(lambda m, s: f"guess {s.seed % 97}: \\boxed{{{s.seed % 5}}}")
    kw = {
        "seeds": [3, 4],
        "group_size": 2,
        "concurrency": 3,
        "env_kwargs": env_kwargs,
        "sampling": SamplingParams(seed=11),
    }
    local = rollout(env_id, policy, **kw)
    remote = rollout(env_id, policy, env_host=workers, **kw)
    assert [_content(e) for e in remote] == [_content(e) for e in local]
    assert len({e.turns[0].completion.text for e in remote}) > 1  # seeds really differ


def test_env_factories_resolve_in_the_workers(workers):
    from toy_envs import CounterEnv  # importable in the workers: driver's sys.path is passed

    local = rollout(lambda: CounterEnv(target=3), OraclePolicy(), seeds=[0, 1])
    remote = rollout(lambda: CounterEnv(target=3), OraclePolicy(), seeds=[0, 1], env_host=workers)
    assert [_content(e) for e in remote] == [_content(e) for e in local]
    assert remote[0].env_id == "CounterEnv"


def test_episodes_are_spread_over_workers_and_envs_are_reused(workers):
    kwargs = {"num_facts": 2}  # a config no other test uses

    async def go():
        a = await workers.acquire(RECALL, kwargs)
        b = await workers.acquire(RECALL, kwargs)
        workers.release(a)
        workers.release(b)
        c = await workers.acquire(RECALL, dict(kwargs))
        workers.release(c)
        return a, b, c

    a, b, c = _run(go())
    assert {a.worker, b.worker} == {0, 1}
    assert (c.worker, c.handle) in {(a.worker, a.handle), (b.worker, b.handle)}
    assert a.env_id == RECALL


# ----------------------------------------------------------------------------- errors
def test_env_error_at_make_reraises_with_the_workers_traceback(workers):
    with pytest.raises(UnknownNameError) as info:  # the env's own exception type still matches
        rollout(MATH, OraclePolicy(), env_kwargs={"kinds": "astrology"}, env_host=workers)
    err = info.value
    assert isinstance(err, EnvWorkerError)
    assert err.env_id == MATH and MATH in str(err)
    assert "astrology" in str(err)
    assert "Traceback in the worker" in str(err) and "_parse_kinds" in err.remote_traceback


def test_env_error_during_an_episode_names_the_env_and_the_call(workers):
    async def go():
        env = await workers.acquire(MATH)
        try:
            await env.reset(seed=0, options={"no_such_option": 1})
        finally:
            workers.release(env, discard=True)

    with pytest.raises(EnvWorkerError) as info:
        _run(go())
    assert f"{MATH} raised UnknownNameError in reset()" in str(info.value)
    assert "no_such_option" in str(info.value) and "_begin" in info.value.remote_traceback


def test_unknown_env_id_fails_in_the_driver_with_suggestions(workers):
    from agentgym import UnknownNameError

    # resolved in the driver before anything goes to a worker; never a failed episode
    with pytest.raises(UnknownNameError, match="Unknown environment id 'agentgym/NoSuchEnv-v0'"):
        rollout("agentgym/NoSuchEnv-v0", OraclePolicy(), env_host=workers)


# ----------------------------------------------------------------------------- time bounds
def test_math_grading_keeps_its_time_bound_in_a_worker(workers):
    async def go():
        env = await workers.acquire(MATH, {"grading_timeout_s": 0.5})
        try:
            await env.reset(seed=0, options={"task_id": "gen/arithmetic/1/7"})
            # sympy would work on this power tower for hours
            step = env.step("\\boxed{9^{9^{9^9}}}")
            _, reward, terminated, _, info = await asyncio.wait_for(step, 120)
        finally:
            workers.release(env)
        return reward, terminated, info["reward_breakdown"]

    reward, terminated, breakdown = _run(go())
    assert terminated and reward == 0.0
    assert breakdown["grade_reason"] == "timeout"


def _local_sandbox_problem() -> str | None:
    try:
        from agentgym.sandbox import open_sandbox

        with open_sandbox("local") as sb:
            sb.run(["true"], timeout=30)
    except Exception as e:
        return str(e)
    return None


def test_sandbox_command_timeout_holds_in_a_worker(workers):
    problem = _local_sandbox_problem()
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the local sandbox cannot start: {problem}")
        pytest.skip(f"the local sandbox cannot start here: {problem}")

    async def go():
        env = await workers.acquire(
            APPGEN,
            # the local backend grades only with the opt-in (this test never grades)
            {
                "sandbox": "local",
                "unsafe_local_grading": True,
                "pool_size": 1,
                "tasks": ["csv_report"],
            },
        )
        try:
            await env.reset(seed=0)
            step = env.step('<run timeout="1">sleep 60</run>')
            obs, _, terminated, truncated, _ = await asyncio.wait_for(step, 120)
        finally:
            workers.release(env, discard=True)
        return obs, terminated or truncated

    obs, ended = _run(go())
    assert not ended
    assert "killed after the 1s timeout" in obs[-1].content


# ----------------------------------------------------------------------------- Ray itself
def test_ray_files_live_outside_the_venv_and_the_repo(workers):
    roots = [Path(sys.prefix).resolve(), REPO]
    default = Path(default_temp_dir()).resolve()
    assert all(default != r and r not in default.parents for r in roots)
    if workers.started_ray and workers.session_dir:
        session = Path(workers.session_dir).resolve()
        assert session.parent == Path(workers.temp_dir)
        assert all(r not in session.parents for r in roots)


def test_temp_dir_is_checked_before_anything_starts(monkeypatch):
    with pytest.raises(ConfigError, match="inside the Python environment"):
        RayEnvWorkers(1, temp_dir=Path(sys.prefix) / "ray-tmp")
    with pytest.raises(ConfigError, match="agentgym source tree"):
        RayEnvWorkers(1, temp_dir=REPO / "ray-tmp")
    with pytest.raises(ConfigError, match="socket"):
        RayEnvWorkers(1, temp_dir="/tmp/" + "x" * 80)
    monkeypatch.setenv(TMPDIR_ENV, "/tmp/agr-elsewhere")
    assert default_temp_dir() == "/tmp/agr-elsewhere"


def test_an_address_where_no_cluster_listens_fails_fast_with_a_hint():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConfigError, match="ray start --head"):
        RayEnvWorkers(1, address=f"127.0.0.1:{port}")
    with pytest.raises(ConfigError, match="host:port"):
        RayEnvWorkers(1, address="not-an-address")


def test_bad_arguments_are_refused():
    with pytest.raises(ConfigError, match="rollout_workers"):
        RayEnvWorkers(0)
    with pytest.raises(ConfigError, match="max_concurrency"):
        RayEnvWorkers(1, max_concurrency=0)


def test_close_ends_the_actors_and_leaves_a_ray_it_did_not_start(workers):
    extra = RayEnvWorkers(1, cpus_per_worker=0)  # joins the module's Ray
    assert not extra.started_ray
    actor = extra._actors[0]

    async def lease():
        env = await extra.acquire(RECALL)
        extra.release(env)

    _run(lease())
    assert extra.env_counts() == [1]
    extra.close()
    extra.close()  # idempotent
    assert extra.closed and ray.is_initialized()
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.info.remote(), timeout=60)
    with pytest.raises(EnvStateError, match="closed"):
        _run(extra.acquire(RECALL))


# ----------------------------------------------------------------------------- the package
def test_every_public_name_resolves_from_the_package():
    import agentgym
    import agentgym.workers as package

    for name in package.__all__:
        assert getattr(package, name) is not None, name
    assert agentgym.RayEnvWorkers is RayEnvWorkers


def test_a_worker_error_report_becomes_an_error_of_the_same_type():
    from agentgym.workers.errors import error_from_report, guarded

    assert guarded(lambda: 3) == ("ok", 3)
    status, report = guarded(lambda: int("x"))
    assert status == "error" and report["type"] == "builtins.ValueError"
    err = error_from_report(
        report, env_id="E-v0", method="step", worker=1, where={"pid": 7, "host": "h"}
    )
    assert isinstance(err, EnvWorkerError) and isinstance(err, ValueError)
    assert str(err).startswith("E-v0 raised ValueError in step() on Ray env worker 1 (pid 7 on h)")
    assert err.remote_type == "builtins.ValueError" and "int(" in err.remote_traceback
    report["type"] = "no_such_module.Error"  # a type the driver cannot import: plain error
    assert type(error_from_report(report, env_id="E", method="m", worker=0, where={})) is (
        EnvWorkerError
    )


def test_a_worker_killed_mid_rollout_is_replaced_and_its_episode_replayed(workers, tmp_path):
    """SIGKILL of a Ray env worker during a step: the worker is replaced, the episode is
    played again with the same seeds, and the rollout equals one without the fault."""
    from toy_envs import DiesOnceEnv

    marker = tmp_path / "died"
    kw = dict(seeds=[0, 1, 2, 3], group_size=2, concurrency=4)
    clean = rollout(lambda: DiesOnceEnv(target=2), OraclePolicy(), **kw)
    replaced = workers.replaced
    faulty = rollout(
        lambda: DiesOnceEnv(marker=str(marker), target=2),
        OraclePolicy(),
        env_host=workers,
        retries=1,
        **kw,
    )
    assert marker.exists() and workers.replaced == replaced + 1
    assert not any(e.failed for e in faulty)
    assert sum("rollout/failed_attempts" in e.metrics for e in faulty) >= 1
    assert {r for e in faulty for r in e.metrics.get("rollout/failed_attempts", [])} == {
        "worker_lost"
    }
    assert [_comparable(e) for e in faulty] == [_comparable(e) for e in clean]
    # the replaced slot works for the next rollout too
    again = rollout(lambda: DiesOnceEnv(target=2), OraclePolicy(), env_host=workers, **kw)
    assert [_comparable(e) for e in again] == [_comparable(e) for e in clean]


def test_episodes_failing_every_attempt_on_one_slot_all_come_back(workers):
    """Issue 35 on the Ray host: a failed episode's env is discarded and its slot goes to
    the episodes waiting for one, so the rollout returns with every episode."""
    from toy_envs import FailsOnSeedsEnv

    from agentgym.rollouts import rollout_async

    run = rollout_async(
        lambda: FailsOnSeedsEnv(fail_seeds=(0, 2), target=2),
        OraclePolicy(),
        seeds=[0, 1, 2, 3],
        concurrency=1,
        retries=1,
        env_host=workers,
    )
    eps = _run(asyncio.wait_for(run, 120))
    assert [e.seed for e in eps] == [0, 1, 2, 3]
    assert [e.failure.reason if e.failed else e.reward for e in eps] == [
        "sandbox_died",
        1.0,
        "sandbox_died",
        1.0,
    ]
    assert eps[0].metrics["rollout/failed_attempts"] == ["sandbox_died"]


def _comparable(ep):
    d = ep.to_dict()
    d["metrics"] = {}
    return d


# ----------------------------------------------------------------------------- health
def _health(workers, want: int, timeout_s: float = 60.0) -> dict[str, dict[str, Any]]:
    """Every worker's health record (waits for new actors to answer their first call)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = {r["worker"]: r for r in workers.health(timeout_s=1.0)}
        if len(got) >= want or time.monotonic() > deadline:
            return got


def test_health_records_count_calls_errors_and_busy_time(workers):
    before = _health(workers, 2)
    assert sorted(before) == ["worker0", "worker1"]
    info = {i["index"]: i for i in workers.info()}
    for rec in before.values():
        assert rec["pid"] == info[rec["index"]]["pid"] and rec["host"] == socket.gethostname()
        assert {"cpu_s", "calls", "errors", "busy_s"} <= set(rec["counters"])
        assert {"rss_mb", "inflight", "oldest_call_s"} <= set(rec["gauges"])
    episodes = rollout(RECALL, OraclePolicy(), num_tasks=4, env_host=workers)

    async def bad_reset():
        env = await workers.acquire(MATH)
        try:
            await env.reset(seed=0, options={"no_such_option": 1})
        finally:
            workers.release(env, discard=True)

    with pytest.raises(EnvWorkerError):
        _run(bad_reset())
    after = _health(workers, 2)
    errors = sum(after[w]["counters"]["errors"] - before[w]["counters"]["errors"] for w in after)
    assert errors == 1
    calls = sum(after[w]["counters"]["calls"] - before[w]["counters"]["calls"] for w in after)
    steps = sum(len(ep.turns) for ep in episodes)
    assert calls >= steps + len(episodes)  # a reset and the steps of every episode, at least
    assert sum(after[w]["counters"]["busy_s"] for w in after) > sum(
        before[w]["counters"]["busy_s"] for w in before
    )
    assert all(after[w]["seq"] > before[w]["seq"] for w in after)


def test_kill_worker_replaces_it_with_a_working_one(workers):
    old = {i["index"]: i["pid"] for i in workers.info()}
    replaced = workers.replaced
    workers.kill_worker(1)
    assert workers.replaced == replaced + 1
    new = {i["index"]: i["pid"] for i in workers.info()}
    assert new[0] == old[0] and new[1] != old[1]
    episodes = rollout(RECALL, OraclePolicy(), seeds=[0, 1, 2, 3], env_host=workers)
    assert not any(e.failed for e in episodes)


def test_a_killed_driver_takes_its_local_ray_and_session_folder_along(tmp_path):
    """kill -9 of a driver that started a local Ray: the reaper ends the Ray processes
    (the agents too) and removes the session folder within seconds."""
    script = (
        "import time\nfrom agentgym.workers import RayEnvWorkers\n"
        "w = RayEnvWorkers(1, cpus_per_worker=0)\n"
        "print(w.session_dir, flush=True)\ntime.sleep(300)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    driver = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        session = driver.stdout.readline().strip()
        assert session and os.path.isdir(session)
        raylets = [p for p in _pids() if session.encode() in _cmdline(p) and b"raylet" in
                   _cmdline(p).split(b"\0")[0]]  # fmt: skip
        assert raylets
        mark = f"RAY_RAYLET_PID={raylets[0]}".encode()
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            left = [p for p in _pids() if session.encode() in _cmdline(p) or _has_env(p, mark)]
            if not left and not os.path.exists(session):
                break
            time.sleep(0.2)
        assert left == [] and not os.path.exists(session), (left, session)
    finally:
        driver.kill()


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _has_env(pid: int, mark: bytes) -> bool:
    try:
        return mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


# ----------------------------------------------------------------------------- a 2-node cluster
_CLUSTER_DRIVER = """
import asyncio, json, os, signal, sys, threading, time
from agentgym.policies import ScriptedPolicy
from agentgym.rollouts import rollout
from agentgym.workers import RayEnvWorkers
from toy_envs import CounterEnv

address, victim = sys.argv[1], int(sys.argv[2])

async def act(messages):
    await asyncio.sleep(0.2)  # keeps the episodes in flight while the node goes
    return "next" if sum(m.role == "assistant" for m in messages) < 2 else "done"

policy = ScriptedPolicy(act)
kw = dict(seeds=list(range(6)), group_size=2, concurrency=12)
clean = rollout(lambda: CounterEnv(target=5), policy, **kw)
workers = RayEnvWorkers(2, address=address, cpus_per_worker=0.5)
nodes = [i["node"] for i in workers.info()]

def kill_node():
    time.sleep(0.5)
    mark = f"RAY_RAYLET_PID={victim}".encode()
    pids = [victim] + [int(p) for p in os.listdir("/proc") if p.isdigit() and _has(p, mark)]
    for p in pids:
        os.kill(p, signal.SIGKILL)

def _has(pid, mark):
    try:
        return mark in open(f"/proc/{pid}/environ", "rb").read().split(b"\\0")
    except OSError:
        return False

threading.Thread(target=kill_node).start()
played = rollout(lambda: CounterEnv(target=5), policy, env_host=workers, retries=1, **kw)
strip = lambda e: {**e.to_dict(), "metrics": {}}
print("RESULT " + json.dumps({
    "nodes": nodes,
    "replaced": workers.replaced,
    "failed": sum(e.failed for e in played),
    "lost": sorted({r for e in played for r in e.metrics.get("rollout/failed_attempts", [])}),
    "same": [strip(e) for e in played] == [strip(e) for e in clean],
}))
"""


@pytest.mark.slow
def test_a_two_node_cluster_survives_losing_a_node_mid_rollout(tmp_path):
    """`ray start --head` plus a second node (`ray start --address`) on this machine,
    joined by address; one worker lands on each node; the second node is killed (its
    raylet and every process it started) during a rollout: its worker is replaced and the
    episodes it held are replayed, identical to a fault-free rollout."""
    import tempfile

    from agentgym.workers.reaper import raylets_of, reap

    temp = tempfile.mkdtemp(prefix="agr-", dir="/tmp")  # short: Ray's socket paths
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO / "tests" / "helpers"), env.get("PYTHONPATH")])
    )
    ray_cli = str(Path(sys.executable).parent / "ray")
    common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats"]
    try:
        subprocess.run(
            [ray_cli, "start", "--head", f"--port={port}", "--num-cpus=2",
             f"--temp-dir={temp}", "--include-dashboard=false", *common],
            env=env, capture_output=True, check=True, timeout=180,
        )  # fmt: skip
        head = raylets_of(temp)
        subprocess.run(
            [ray_cli, "start", f"--address=127.0.0.1:{port}", "--num-cpus=1", *common],
            env=env, capture_output=True, check=True, timeout=180,
        )  # fmt: skip
        (second,) = raylets_of(temp) - head
        r = subprocess.run(
            [sys.executable, "-c", _CLUSTER_DRIVER, f"127.0.0.1:{port}", str(second)],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
        (line,) = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
        got = json.loads(line.removeprefix("RESULT "))
        assert len(set(got["nodes"])) == 2  # a worker on each node
        assert got["replaced"] >= 1 and got["lost"] == ["worker_lost"] and got["failed"] == 0
        assert got["same"]
    finally:
        for session in Path(temp).glob("session_2*"):
            reap(str(session), raylets_of(str(session)), keep_logs=False)
        import shutil

        shutil.rmtree(temp, ignore_errors=True)
