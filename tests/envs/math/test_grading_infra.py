"""Issue 17's grading item: capacity that grows with the callers, a deadline that counts
the grading (not the queue), and grader failures that are infrastructure failures."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest

import agentgym
from agentgym.envs.math import grade, grading, pool, warm_up
from agentgym.envs.math.pool import GradingPool, PoolError, PoolReply

TOWER = "9^{9^{9^9}}"  # sympy would work on this for hours


@pytest.fixture(scope="module", autouse=True)
def _warm_pool():
    warm_up()


class _FakePool:
    """Answers every request with one status, as a pool in trouble would."""

    def __init__(self, status: str) -> None:
        self.status = status

    def request(self, *args, **kwargs) -> PoolReply:
        return PoolReply(self.status, None, 0.0)


@pytest.mark.parametrize(
    ("status", "reason", "infra"),
    [
        ("starved", "grader_timeout", True),
        ("busy", "grader_timeout", True),
        ("crashed", "grader_crashed", True),
        ("timeout", "timeout", False),
        ("error", "grader_error", False),
    ],
)
def test_pool_statuses_become_reasons(monkeypatch, status, reason, infra):
    monkeypatch.setattr(grading, "get_pool", lambda: _FakePool(status))
    r = grade("\\boxed{(x+3)^5}", "x^5+1")  # needs the symbolic path
    assert (r.correct, r.reason, r.infra_failure) == (False, reason, infra)


def test_an_unreachable_pool_is_a_crashed_grader(monkeypatch):
    def broken():
        raise PoolError("the zygote did not start")

    monkeypatch.setattr(grading, "get_pool", broken)
    r = grade("\\boxed{(x+3)^6}", "x^6+1")
    assert (r.reason, r.infra_failure) == ("grader_crashed", True)


def _env_step(monkeypatch, status: str):
    monkeypatch.setattr(grading, "get_pool", lambda: _FakePool(status))
    env = gym.make("agentgym/BalancedMath-v0").unwrapped
    env.reset(options={"task_id": "gen/simplify/2/5"})
    return env, env.step("So \\boxed{(x+1)^7}.")  # a polynomial: symbolic path


@pytest.mark.parametrize(
    ("status", "reason"), [("starved", "grader_timeout"), ("crashed", "grader_crashed")]
)
def test_env_raises_infra_error_instead_of_scoring(monkeypatch, status, reason):
    with pytest.raises(agentgym.InfraError) as info:
        _env_step(monkeypatch, status)
    assert info.value.reason == reason
    assert "gen/simplify/2/5" in str(info.value) and "not the agent's fault" in str(info.value)


def test_env_scores_a_costly_answer_as_wrong(monkeypatch):
    # a check that used its whole deadline on the answer is the answer's fault
    env, (_, reward, terminated, _, info) = _env_step(monkeypatch, "timeout")
    assert terminated and reward == 0.0
    assert info["reward_breakdown"]["grade_reason"] == "timeout"


# ------------------------------------------------------------------------------ the pool
def test_a_timeout_is_classified_by_the_cpu_the_worker_got(monkeypatch):
    p = GradingPool(size=1, max_size=1)
    try:
        p.start()
        monkeypatch.setattr(pool, "_process_cpu_s", lambda pid: 0.0)  # got no CPU at all
        assert p.request("1", [TOWER], 0.3).status == "starved"
        monkeypatch.setattr(pool, "_process_cpu_s", lambda pid: 1e6)  # ran all the time
        assert p.request("1", [TOWER], 0.3).status == "timeout"
        assert p.replaced == 2
        assert p.run("x^2-1", ["(x-1)(x+1)"], timeout_s=5) == ("ok", [True])
    finally:
        p.shutdown()


def test_the_pool_grows_so_that_no_caller_waits():
    p = GradingPool(size=1, max_size=3)
    try:
        p.start()
        with ThreadPoolExecutor(max_workers=3) as ex:
            replies = list(ex.map(lambda _: p.request("1", [TOWER], 0.6), range(3)))
        assert p.workers == 3
        for r in replies:
            assert r.status in ("timeout", "starved")
            assert r.wait_s < 0.3  # a fresh worker, not a queue
    finally:
        p.shutdown()


def test_the_queue_wait_is_bounded_separately_from_the_grading():
    p = GradingPool(size=1, max_size=1)
    try:
        p.start()
        with ThreadPoolExecutor(max_workers=3) as ex:
            slow = ex.submit(p.request, "1", [TOWER], 0.6)
            time.sleep(0.1)  # the tower holds the only worker
            queued = ex.submit(p.request, "x^2-1", ["(x-1)(x+1)"], 0.2, queue_timeout_s=10)
            busy = ex.submit(p.request, "x^2-1", ["(x-1)(x+1)"], 0.2, queue_timeout_s=0.05)
            first, second, third = slow.result(), queued.result(), busy.result()
        assert first.status in ("timeout", "starved")
        # waited for the tower's worker (longer than its own 0.2 s deadline), then graded
        assert second.status == "ok" and second.value == [True] and second.wait_s > 0.2
        assert third.status == "busy"
    finally:
        p.shutdown()


def test_right_answers_from_many_threads_are_all_scored_right():
    # distinct symbolic answers (no cache), more threads than the pool has workers
    pairs = [(f"\\boxed{{(x+{k})(x-{k})}}", f"x^2-{k * k}") for k in range(101, 141)]
    pairs += [
        (f"\\boxed{{\\frac{{\\sqrt{{{k}}}}}{{2}}}}", f"\\frac{{1}}{{2}}\\sqrt{{{k}}}")
        for k in (2, 3, 5, 6, 7, 10, 11, 13)
    ]
    with ThreadPoolExecutor(max_workers=32) as ex:
        results = list(ex.map(lambda pr: grade(*pr), pairs))
    assert [r.reason for r in results] == ["correct"] * len(pairs)


def _stopped_worker_pool(timeout_s: float):
    """A one-worker pool whose worker is frozen (SIGSTOP): a machine giving it no CPU."""
    p = GradingPool(size=1, max_size=1)
    p.start()
    pid = p._idle.queue[0].pid
    os.kill(pid, signal.SIGSTOP)
    return p, pid


def test_a_starved_worker_gets_more_time_and_its_answer_counts():
    p, pid = _stopped_worker_pool(0.3)
    try:
        threading.Timer(0.6, os.kill, (pid, signal.SIGCONT)).start()  # CPU comes back late
        t = time.monotonic()
        reply = p.request("x^2-1", ["(x-1)(x+1)"], 0.3)
        assert (reply.status, reply.value) == ("ok", [True])
        assert 0.55 < time.monotonic() - t < 0.3 * pool.STARVED_WALL_FACTOR + 0.5
    finally:
        p.shutdown()


def test_a_worker_starved_for_too_long_is_an_infrastructure_failure():
    p, pid = _stopped_worker_pool(0.3)
    try:
        t = time.monotonic()
        reply = p.request("x^2-1", ["(x-1)(x+1)"], 0.3)
        elapsed = time.monotonic() - t
        assert reply.status == "starved" and reply.cpu_s is not None and reply.cpu_s < 0.05
        assert 0.3 * pool.STARVED_WALL_FACTOR - 0.05 < elapsed < 0.3 * pool.STARVED_WALL_FACTOR + 1
        assert p.replaced == 1 and p.run("x^2-1", ["(x-1)(x+1)"], 5) == ("ok", [True])
    finally:
        p.shutdown()


def test_a_costly_looking_answer_is_cut_at_the_deadline_even_when_starved():
    p, pid = _stopped_worker_pool(0.3)
    try:
        t = time.monotonic()
        reply = p.request("1", [TOWER], 0.3, may_starve=False)
        assert reply.status == "timeout" and time.monotonic() - t < 0.3 + 0.5
    finally:
        p.shutdown()


@pytest.mark.parametrize(
    ("answer", "costly"),
    [
        (TOWER, True),
        ("2^{2^{40}}", True),
        ("10^{10^{10}}", True),
        ("99999999999999999999^{99999999}", True),
        ("1000000!", True),
        ("x^2+2x+1", False),
        ("2^{10}", False),
        ("e^{i\\pi}", False),
        ("x^{2}y^{3}", False),
        ("5!", False),
    ],
)
def test_costly_shapes(answer, costly):
    from agentgym.envs.math.normalize import looks_costly

    assert looks_costly(answer) is costly


def test_a_shutdown_during_start_up_cuts_it_short():
    """A process that exits while the pool still starts (the zygote importing sympy) does
    not wait for the start: the zygote is stopped, the start gives up, nothing is left."""
    p = GradingPool(size=1)
    gave_up: list[PoolError] = []

    def start() -> None:
        try:
            p.start()
        except PoolError as e:
            gave_up.append(e)

    starter = threading.Thread(target=start)
    starter.start()
    while p._zygote is None:  # the zygote is being started (its import takes ~1 s)
        time.sleep(0.001)
    zygote = p._zygote
    p.shutdown()
    starter.join(timeout=60)
    assert not starter.is_alive() and not p.started and gave_up
    assert zygote.poll() is not None  # stopped, and reaped
    with pytest.raises(PoolError, match="shut down"):
        p.start()


def test_a_started_pool_stops_its_zygote_and_workers():
    p = GradingPool(size=2)
    p.start()
    pids = [w.pid for w in list(p._idle.queue)]
    zygote = p._zygote
    p.shutdown()
    assert zygote.poll() is not None
    for pid in pids:  # the zygote killed and reaped each worker before it exited
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
