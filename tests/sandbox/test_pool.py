"""SandboxPool over real Docker sandboxes: clean hand-over, replacement, bounds, concurrency."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agentgym.errors import ConfigError, InfraError, SandboxError
from agentgym.sandbox import SandboxPool, docker_client

from .conftest import COUNT_USER_PROCS, skip_without_docker

skip_without_docker()
pytestmark = pytest.mark.docker


def container_exists(cid: str) -> bool:
    return bool(docker_client().api.containers(all=True, filters={"id": cid}))


def test_pool_options_are_validated():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="size"):
            SandboxPool(size=bad, backend="docker", warm=0)
    with pytest.raises(ConfigError, match="warm"):
        SandboxPool(size=1, backend="docker", warm=2)


def test_released_sandbox_comes_back_clean():
    with SandboxPool(size=1, backend="docker", prune=False) as pool:
        assert pool.stats()["idle"] == 1  # started warm
        sb = pool.acquire()
        cid = sb.container_id
        sb.write_files({"secret.txt": "first holder", "dir/x.py": "x"})
        assert sb.run(
            "echo t > /tmp/t; echo s > /dev/shm/s; touch .hidden; nohup sleep 600 >/dev/null 2>&1 &"
        ).ok
        pool.release(sb)
        again = pool.acquire()
        assert again.container_id == cid  # reused, not replaced
        assert again.list_files() == []
        assert (
            again.run("ls -A /workspace /tmp /dev/shm").stdout
            == "/dev/shm:\n\n/tmp:\n\n/workspace:\n"
        )
        r = again.run(["python3", "-c", COUNT_USER_PROCS])
        assert r.stdout == "0\n"  # the sleep left by the first holder is gone
        pool.release(again)
        assert pool.stats()["replaced"] == 0


def test_broken_sandboxes_are_replaced():
    api = docker_client().api
    with SandboxPool(size=1, backend="docker", prune=False) as pool:
        # broken while idle: the container disappears behind the pool's back
        sb = pool.acquire()
        first = sb.container_id
        pool.release(sb)
        api.remove_container(first, force=True)
        sb = pool.acquire()
        assert sb.container_id != first
        assert sb.run("echo fine").stdout == "fine\n"
        # broken while held: the holder sees an infrastructure error; release replaces it
        second = sb.container_id
        api.remove_container(second, force=True)
        with pytest.raises(InfraError, match="removed from outside") as info:
            sb.run("true")
        assert info.value.reason == "sandbox_died"
        pool.release(sb)
        sb = pool.acquire()
        assert sb.container_id not in (first, second)
        assert sb.run("echo fine").stdout == "fine\n"
        # closed by its holder
        sb.close()
        pool.release(sb)
        with pool.sandbox() as sb2:
            assert sb2.run("echo fine").stdout == "fine\n"
        assert pool.stats()["replaced"] == 3


def _engine_refuses(monkeypatch, times: int) -> list[str]:
    """Make the engine fail to start the next ``times`` execs the way it does when the
    previous holder's processes fill the container's pids or memory limit (exit 126, its
    reason on stdout, nothing run); the argv of each refused exec is recorded."""
    import agentgym.sandbox.docker.sandbox as dsb
    from agentgym.sandbox.docker.streaming import ExecEnd

    real, refused = dsb.stream_exec, []

    def flaky(api, cid, argv, **kw):
        if len(refused) < times:
            refused.append(" ".join(argv))
            kw["stdout"].feed(b"OCI runtime exec failed: read init-p: connection reset by peer")
            return ExecEnd(126, 0.01, False, None)
        return real(api, cid, argv, **kw)

    monkeypatch.setattr(dsb, "stream_exec", flaky)
    return refused


def test_a_clean_the_engine_cannot_start_replaces_the_container(monkeypatch):
    with SandboxPool(size=1, backend="docker", prune=False) as pool:
        sb = pool.acquire()
        first = sb.container_id
        sb.write_files({"left.txt": "by the first holder"})
        assert sb.run("nohup sleep 600 >/dev/null 2>&1 &").ok
        pool.release(sb)
        refused = _engine_refuses(monkeypatch, times=1)
        sb = pool.acquire()
        sb.write_files({"mine.txt": "second holder"})  # the exec that should have cleaned
        assert len(refused) == 1 and "agentgym-sandbox 1" in refused[0]  # it was a clean
        assert sb.container_id != first and not container_exists(first)
        assert sb.list_files() == ["mine.txt"]
        assert sb.run(["python3", "-c", COUNT_USER_PROCS]).stdout == "0\n"  # no sleep left
        r = sb.run("echo out; echo err >&2")
        assert (r.stdout, r.stderr) == ("out\n", "err\n")  # the clean's mark is not output
        pool.release(sb)


def test_an_exec_refused_in_the_fresh_container_too_says_what_the_engine_said(monkeypatch):
    with SandboxPool(size=1, backend="docker", prune=False) as pool:
        sb = pool.acquire()
        sb.run("true")
        pool.release(sb)
        refused = _engine_refuses(monkeypatch, times=2)
        sb = pool.acquire()
        with pytest.raises(SandboxError, match=r"'write' failed \(exit 126, 'OCI runtime exec"):
            sb.write_files({"a.txt": "a"})
        assert "agentgym-sandbox 0" in refused[1]  # the fresh container needed no clean
        sb.write_files({"a.txt": "a"})  # the engine recovered: the sandbox is usable
        assert sb.list_files() == ["a.txt"]
        pool.release(sb)


def test_pool_is_bounded_and_release_is_checked():
    with SandboxPool(size=2, backend="docker", warm=0, prune=False) as pool:
        a, b = pool.acquire(), pool.acquire()
        with pytest.raises(SandboxError, match="all 2 are in use"):
            pool.acquire(timeout=0.2)
        got: list = []
        waiter = threading.Thread(target=lambda: got.append(pool.acquire(timeout=30)))
        waiter.start()
        pool.release(a)
        waiter.join()
        assert got == [a]
        with pytest.raises(SandboxError, match="not held"):
            pool.release(a.__class__.__new__(a.__class__))
        pool.release(got[0])
        with pytest.raises(SandboxError, match="not held"):
            pool.release(got[0])  # twice
        pool.release(b)
        assert pool.stats() == {"size": 2, "idle": 2, "in_use": 0, "created": 2, "replaced": 0}


def test_threads_never_share_a_sandbox():
    errors: list[str] = []
    with SandboxPool(size=2, backend="docker", prune=False) as pool:

        def worker(i: int) -> None:
            for j in range(2):
                with pool.sandbox(timeout=120) as sb:
                    name = f"w{i}_{j}.txt"
                    sb.write_files({name: name})
                    r = sb.run("ls")
                    if r.stdout != name + "\n":
                        errors.append(f"{name}: saw {r.stdout!r}")

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert pool.stats()["created"] == 2
    assert errors == []


def test_asyncio_use_and_close_removes_everything():
    async def main() -> list[str]:
        async with SandboxPool(size=2, backend="docker", prune=False) as pool:

            async def one(i: int) -> str:
                async with pool.sandbox_async() as sb:
                    await sb.write_files_async({"n.txt": str(i)})
                    r = await sb.run_async("cat n.txt")
                    return r.stdout

            outs = await asyncio.gather(*(one(i) for i in range(5)))
            held = await pool.acquire_async()
            ids = [held.container_id]
            assert pool.stats()["in_use"] == 1
        # leaving the block closed the pool, including the sandbox still held
        assert held.closed
        with pytest.raises(SandboxError, match="closed"):
            pool.acquire()
        return [*outs, *ids]

    *outs, held_id = asyncio.run(main())
    assert sorted(outs) == ["0", "1", "2", "3", "4"]
    assert not container_exists(held_id)


def test_cancelled_acquire_gives_the_sandbox_back():
    async def main() -> dict:
        with SandboxPool(size=1, backend="docker", prune=False) as pool:
            holder = await pool.acquire_async()
            waiting = asyncio.create_task(pool.acquire_async(timeout=60))
            await asyncio.sleep(0.2)
            waiting.cancel()
            await pool.release_async(holder)
            with pytest.raises(asyncio.CancelledError):
                await waiting
            for _ in range(100):  # the worker thread finishes its acquire, then gives back
                s = pool.stats()
                if s["in_use"] == 0 and s["idle"] == 1:
                    break
                await asyncio.sleep(0.05)
            return pool.stats()

    stats = asyncio.run(main())
    assert stats["in_use"] == 0 and stats["idle"] == 1


def test_a_pool_that_never_reuses_hands_every_holder_a_fresh_sandbox():
    """``reuse=False``: a released sandbox is closed and a fresh one starts in its place in
    the background, so the next holder gets a container no one held, without waiting."""
    with SandboxPool(size=1, backend="docker", reuse=False, prune=False) as pool:
        seen = []
        for _ in range(2):
            with pool.sandbox() as sb:
                seen.append(sb.container_id)
                sb.write_files({"mine.txt": "x"})
        for _ in range(100):  # the replacement starts off the releasing thread
            if pool.stats()["idle"] == 1:
                break
            threading.Event().wait(0.05)
        with pool.sandbox() as sb:
            assert sb.list_files() == []
            seen.append(sb.container_id)
        assert len(set(seen)) == 3
        assert not container_exists(seen[0]) and not container_exists(seen[1])
        assert pool.stats()["replaced"] == 0 and pool.stats()["in_use"] == 0
