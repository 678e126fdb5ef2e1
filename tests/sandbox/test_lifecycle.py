"""Containers never outlive their owner for long: signals, SIGKILL + prune, the CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import pytest

from agentgym.sandbox import build_image, default_image, list_sandbox_containers

from .conftest import skip_without_docker

skip_without_docker()
pytestmark = pytest.mark.docker

OWNER = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in any program run by hand
signal.signal(signal.SIGTERM, signal.SIG_DFL)
from agentgym.sandbox import open_sandbox
boxes = [open_sandbox("docker") for _ in range(int(sys.argv[1]))]
print("ready", flush=True)
time.sleep(600)
"""


def in_own_host(host: str | None, argv: list[str]) -> list[str]:
    """``argv`` run under host name ``host`` (a private UTS namespace), so that other test
    processes pruning on this machine leave its leftovers to this test alone."""
    if host is None:
        return argv
    userns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *userns, "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host, *argv]


def start_owner(n: int, host: str | None = None) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        in_own_host(host, [sys.executable, "-c", OWNER, str(n)]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise AssertionError(f"owner did not start: {line!r} {proc.stderr.read()}")
    return proc


def containers_of(pid: int) -> list[str]:
    return sorted(c["Names"][0].lstrip("/") for c in list_sandbox_containers(owner_pid=pid))


def agentgym(*args: str, host: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        in_own_host(host, [sys.executable, "-m", "agentgym", *args]),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_removes_the_owners_containers(sig):
    proc = start_owner(2)
    try:
        assert len(containers_of(proc.pid)) == 2
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert containers_of(proc.pid) == []
    if sig == signal.SIGTERM:
        assert proc.returncode == -signal.SIGTERM  # the default action still happened
    else:
        assert "KeyboardInterrupt" in proc.stderr.read()  # Python's handler still ran


def test_sigkill_leftovers_are_pruned_by_the_cli_and_by_a_new_pool():
    host = "agtest-" + uuid.uuid4().hex[:8]
    # SIGKILL: no handler can run, the containers stay behind ...
    proc = start_owner(2, host)
    names = containers_of(proc.pid)
    assert len(names) == 2
    proc.kill()
    proc.wait(timeout=30)
    assert containers_of(proc.pid) == names
    dry = agentgym("sandbox", "prune", "--dry-run", host=host)
    assert dry.returncode == 0, dry.stderr
    assert all(f"would remove {n}" in dry.stdout for n in names), dry.stdout
    assert containers_of(proc.pid) == names
    # ... until `agentgym sandbox prune` removes them
    pruned = agentgym("sandbox", "prune", host=host)
    assert pruned.returncode == 0, pruned.stderr
    assert all(f"removed {n}" in pruned.stdout for n in names), pruned.stdout
    assert containers_of(proc.pid) == []

    # a new pool prunes leftovers when it starts
    proc = start_owner(1, host)
    proc.kill()
    proc.wait(timeout=30)
    assert len(containers_of(proc.pid)) == 1
    new_pool = "from agentgym.sandbox import SandboxPool; SandboxPool(1, backend='docker').close()"
    started = subprocess.run(
        in_own_host(host, [sys.executable, "-c", new_pool]), capture_output=True, text=True
    )
    assert started.returncode == 0, started.stderr
    assert containers_of(proc.pid) == []


def test_any_new_docker_user_prunes_leftovers_at_start():
    """Not only a pool: the first Docker sandbox a process opens reaps dead owners' containers."""
    host = "agtest-" + uuid.uuid4().hex[:8]
    proc = start_owner(1, host)
    proc.kill()
    proc.wait(timeout=30)
    assert len(containers_of(proc.pid)) == 1
    one = "from agentgym.sandbox import open_sandbox; open_sandbox('docker').close()"
    started = subprocess.run(
        in_own_host(host, [sys.executable, "-c", one]), capture_output=True, text=True
    )
    assert started.returncode == 0, started.stderr
    assert containers_of(proc.pid) == []


def test_prune_leaves_live_owners_alone():
    proc = start_owner(1)
    try:
        names = containers_of(proc.pid)
        assert agentgym("sandbox", "prune").returncode == 0
        assert containers_of(proc.pid) == names
    finally:
        proc.kill()
        proc.wait(timeout=30)
        agentgym("sandbox", "prune")
    assert containers_of(proc.pid) == []


def test_build_image_is_cached_and_doctor_reports_ready():
    result = build_image(progress=lambda line: None)
    assert result.image == default_image() and not result.built
    assert result.size_mb > 10
    cli = agentgym("sandbox", "build-image")
    assert cli.returncode == 0 and "already built" in cli.stdout
    doc = agentgym("sandbox", "doctor")
    assert doc.returncode == 0, doc.stdout + doc.stderr
    for name in ("engine", "limits", "image", "sandbox"):
        assert any(line.startswith("[ok  ] " + name) for line in doc.stdout.splitlines()), name


def test_doctor_names_the_fix_for_a_missing_image():
    env = {**os.environ, "AGENTGYM_SANDBOX_IMAGE": "agentgym-sandbox:not-built"}
    doc = subprocess.run(
        [sys.executable, "-m", "agentgym", "sandbox", "doctor", "--no-smoke"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert doc.returncode == 1
    lines = doc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("[FAIL] image"))
    assert "agentgym-sandbox:not-built is not there" in lines[at]
    assert "fix: agentgym sandbox build-image" in lines[at + 1]


def test_a_docker_program_ends_without_an_unclosed_socket_warning():
    """The process's Docker client is closed at exit: an AppGen eval run with warnings
    shown (-W default, as under pytest or python -X dev) prints no ResourceWarning about
    the engine's socket when the interpreter ends."""
    r = subprocess.run(
        [
            *(sys.executable, "-W", "default", "-m", "agentgym", "eval", "agentgym/AppGen-v0"),
            *("--policy", "oracle", "--episodes", "1"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "mean_turns" in r.stdout
    assert "sys:1: ResourceWarning" not in r.stderr, r.stderr[-3000:]


HANG = """
import asyncio


async def hang(messages):
    await asyncio.sleep(600)  # the episode's sandbox is up; the policy never answers
    return ""
"""


def test_sigterm_to_agentgym_eval_removes_the_sandboxes_its_env_threads_made(tmp_path):
    """The env makes its sandbox on an env thread, where no signal handler can be
    installed: ``agentgym eval`` installs the clean-up from its main thread (issue 35)."""
    import time

    (tmp_path / "hangs.py").write_text(HANG)
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentgym", "eval", "agentgym/AppGen-v0",
         "--policy", "scripted:hangs:hang", "--episodes", "1", "--json"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not containers_of(proc.pid) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.5)
        assert containers_of(proc.pid), "the episode's sandbox never started"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert containers_of(proc.pid) == []
    assert proc.returncode == -signal.SIGTERM


def test_prunes_racing_for_one_leftover_report_it_only_once_it_is_gone():
    """Several prunes can race for one leftover (every new Docker user prunes at start):
    the engine tells the later ones "removal already in progress" while the container
    still exists. A prune that reports a container removed returns after it is gone,
    whoever removed it (a test once saw the leftover right after a prune)."""
    import threading

    from agentgym.sandbox.docker.leftovers import prune

    proc = start_owner(1)
    (name,) = containers_of(proc.pid)
    proc.kill()
    proc.wait(timeout=30)
    seen: list[tuple[list[str], list[str]]] = []

    def one() -> None:
        removed = prune()
        seen.append((removed, containers_of(proc.pid)))

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(seen) == 3
    assert any(name in removed for removed, _ in seen)
    for removed, left in seen:
        if name in removed:
            assert left == [], (removed, left)
