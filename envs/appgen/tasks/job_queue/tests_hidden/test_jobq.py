import json
import os
import sys

import pytest

from apptest import subprocess

ROOT = os.getcwd()


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def env(tmp_path):
    from jobq.queue import JobQueue

    clock = Clock()
    q = JobQueue(str(tmp_path / "q.db"), clock=clock, lease_seconds=10)
    yield q, clock
    q.close()


def test_job_shape_and_validation(env):
    from jobq.errors import QueueError

    q, clock = env
    job_id = q.enqueue("a", [1, {"x": None}], delay=5)
    assert q.get(job_id) == {
        "id": 1,
        "queue": "a",
        "payload": [1, {"x": None}],
        "state": "ready",
        "attempts": 0,
        "available_at": 1005.0,
        "error": None,
    }
    with pytest.raises(QueueError):
        q.enqueue("", 1)
    with pytest.raises(QueueError):
        q.enqueue("a", 1, delay=-1)
    with pytest.raises(QueueError):
        q.enqueue("a", {1, 2})
    with pytest.raises(QueueError, match="99"):
        q.get(99)


def test_claim_order_and_delay(env):
    q, clock = env
    a = q.enqueue("w", "a", delay=3)
    b = q.enqueue("w", "b")
    c = q.enqueue("w", "c")
    q.enqueue("other", "x")
    assert q.claim("w")["id"] == b
    assert q.claim("w")["id"] == c
    assert q.claim("w") is None
    clock.now += 3
    job = q.claim("w")
    assert job["id"] == a and job["available_at"] == 1013.0
    assert q.claim("nobody") is None


def test_lease_expiry(env):
    from jobq.errors import QueueError

    q, clock = env
    job_id = q.enqueue("w", 1)
    q.claim("w")
    assert q.stats("w") == {"ready": 0, "leased": 1, "done": 0, "dead": 0}
    clock.now += 10
    assert q.stats("w") == {"ready": 1, "leased": 0, "done": 0, "dead": 0}
    with pytest.raises(QueueError):
        q.complete(job_id)
    again = q.claim("w")
    assert again["id"] == job_id and again["attempts"] == 2
    q.complete(job_id)
    assert q.stats("w")["done"] == 1


def test_fail_backoff_and_dead(env):
    q, clock = env
    job_id = q.enqueue("w", "p")
    q.claim("w")
    q.fail(job_id, "boom 1")
    job = q.get(job_id)
    assert (job["state"], job["error"], job["available_at"]) == ("ready", "boom 1", 1002.0)
    clock.now += 1.5
    assert q.claim("w") is None
    clock.now += 0.5
    q.claim("w")
    q.fail(job_id, "boom 2")
    assert q.get(job_id)["available_at"] == clock.now + 4
    clock.now += 4
    q.claim("w")
    q.fail(job_id, "boom 3")
    job = q.get(job_id)
    assert (job["state"], job["attempts"], job["error"]) == ("dead", 3, "boom 3")
    assert [j["id"] for j in q.dead("w")] == [job_id]
    assert q.stats("w") == {"ready": 0, "leased": 0, "done": 0, "dead": 1}


def test_state_errors_and_retry_dead(env):
    from jobq.errors import QueueError

    q, clock = env
    job_id = q.enqueue("w", "p")
    with pytest.raises(QueueError):
        q.complete(job_id)
    with pytest.raises(QueueError):
        q.fail(job_id, "x")
    with pytest.raises(QueueError):
        q.complete(42)
    with pytest.raises(QueueError):
        q.retry_dead(job_id)
    for _ in range(3):
        q.claim("w")
        q.fail(job_id, "e")
        clock.now += 100
    assert q.get(job_id)["state"] == "dead"
    q.retry_dead(job_id)
    job = q.get(job_id)
    assert (job["state"], job["attempts"], job["available_at"]) == ("ready", 0, clock.now)
    assert q.claim("w")["id"] == job_id


def test_custom_policy(tmp_path):
    from jobq.queue import JobQueue

    clock = Clock()
    q = JobQueue(
        str(tmp_path / "c.db"), clock=clock, lease_seconds=1, max_attempts=1, backoff_base=3.0
    )
    job_id = q.enqueue("w", None)
    assert q.claim("w")["available_at"] == 1001.0
    q.fail(job_id, "once")
    assert q.get(job_id)["state"] == "dead"
    q.close()


def test_persistence(tmp_path):
    from jobq.queue import JobQueue

    path = str(tmp_path / "p.db")
    clock = Clock()
    q = JobQueue(path, clock=clock)
    q.enqueue("w", {"n": 1})
    q.enqueue("w", {"n": 2})
    q.claim("w")
    q.close()
    r = JobQueue(path, clock=clock)
    assert r.stats("w") == {"ready": 1, "leased": 1, "done": 0, "dead": 0}
    assert r.claim("w")["payload"] == {"n": 2}
    r.close()


def jobq(db, *args):
    return subprocess.run(
        [sys.executable, "-m", "jobq", "--db", str(db), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )


def test_cli(tmp_path):
    db = tmp_path / "cli.db"
    assert jobq(db, "enqueue", "mail", '{"to": "bob"}').stdout.strip() == "1"
    assert jobq(db, "enqueue", "mail", '"later"', "--delay", "3600").stdout.strip() == "2"
    job = json.loads(jobq(db, "claim", "mail").stdout)
    assert (job["id"], job["payload"], job["state"], job["attempts"]) == (
        1,
        {"to": "bob"},
        "leased",
        1,
    )
    assert jobq(db, "claim", "mail").stdout.strip() == "empty"
    assert jobq(db, "fail", "1", "smtp down").stdout.strip() == "ready"
    assert json.loads(jobq(db, "stats", "mail").stdout) == {
        "ready": 2,
        "leased": 0,
        "done": 0,
        "dead": 0,
    }
    out = jobq(db, "complete", "1")
    assert out.returncode == 1 and out.stderr.startswith("error:")
    out = jobq(db, "enqueue", "mail", "{bad json")
    assert out.returncode == 1 and out.stderr.startswith("error:")
