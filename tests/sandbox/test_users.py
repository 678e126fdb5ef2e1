"""Two users in one Docker sandbox: ``run(user=...)``, ``start()`` and the reset of both.

AppGen grades with its grader as root in the container (holding only CAP_DAC_OVERRIDE)
and the project's code as the sandbox user; these tests pin the guarantees that rests on.
"""

from __future__ import annotations

import time

import pytest

from agentgym.errors import SandboxError
from agentgym.sandbox import open_sandbox

from .conftest import skip_without_docker

skip_without_docker()
pytestmark = pytest.mark.docker

ROOT = "0:0"
#: prints "uid name" for every process in the container (the image has no ps)
PROCESSES = r"""
import os
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            status = open(f"/proc/{p}/status").read().splitlines()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status if ":" in line)
        print(fields["Uid"].split()[0], fields["Name"].strip())
"""


def processes(sb) -> list[tuple[str, str]]:
    out = sb.run(["python3", "-c", PROCESSES], user=ROOT).stdout
    return [tuple(line.split(" ", 1)) for line in out.splitlines()]


def test_root_reads_and_changes_the_sandbox_users_private_files(dsb):
    made = dsb.run("umask 077; mkdir -p /tmp/mine && echo secret > /tmp/mine/f; echo w > w.txt")
    assert made.exit_code == 0, made.stderr
    r = dsb.run("cat /tmp/mine/f && echo more >> w.txt && cat w.txt", user=ROOT)
    assert (r.exit_code, r.stdout) == (0, "secret\nw\nmore\n"), r.stderr
    caps = dsb.run("grep CapEff /proc/self/status", user=ROOT).stdout
    assert caps.split()[-1] == "0000000000000002"  # CAP_DAC_OVERRIDE, nothing else
    assert dsb.run("grep CapEff /proc/self/status").stdout.split()[-1] == "0" * 16


def test_the_sandbox_user_cannot_read_or_signal_root(dsb):
    r = dsb.run("mkdir -m 700 /tmp/grader && echo hidden > /tmp/grader/t.py", user=ROOT)
    assert r.exit_code == 0, r.stderr
    denied = dsb.run("ls /tmp/grader; cat /tmp/grader/t.py")
    assert denied.exit_code != 0 and "Permission denied" in denied.stderr
    assert "hidden" not in denied.stdout
    dsb.start(["sleep", "30"], timeout=60, user=ROOT)
    time.sleep(0.3)
    assert ("0", "sleep") in processes(dsb)
    dsb.run("kill -9 -1; true")
    assert ("0", "sleep") in processes(dsb)


def test_start_runs_in_the_background_and_reset_ends_it():
    with open_sandbox("docker") as sb:
        t0 = time.monotonic()
        sb.start("sleep 1; echo late > late.txt; sleep 300", timeout=600)
        assert time.monotonic() - t0 < 5
        deadline = time.monotonic() + 20
        while "late.txt" not in sb.list_files() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sb.read_file("late.txt") == "late\n"
        container = sb.container_id
        assert ("1000", "sleep") in processes(sb)
        sb.reset()
        assert sb.list_files() == []
        assert ("1000", "sleep") not in processes(sb)
        assert sb.container_id == container


def test_reset_cleans_every_users_files_and_processes_without_replacing_the_container():
    with open_sandbox("docker") as sb:
        sb.start(["sleep", "300"], timeout=600, user=ROOT)
        sb.start(["sleep", "300"], timeout=600)
        r = sb.run(
            "mkdir -m 777 /tmp/shared && mkdir -m 700 /tmp/own && touch /tmp/own/x", user=ROOT
        )
        assert r.exit_code == 0, r.stderr
        assert sb.run("mkdir -m 700 /tmp/shared/mine && touch /tmp/shared/mine/y a").exit_code == 0
        container = sb.container_id
        assert {("0", "sleep"), ("1000", "sleep")} <= set(processes(sb))
        sb.reset()
        assert sb.run("ls -A /tmp /workspace").stdout.split() == ["/tmp:", "/workspace:"]
        assert sb.container_id == container
        sleeping = [p for p in processes(sb) if p[1] == "sleep"]
        assert sleeping == [("0", "sleep")]  # only the container's keeper


def test_a_root_of_another_group_and_a_third_user_are_cleaned_keeping_the_container():
    """AppGen seals its grader's files as root with the grader's group ("0:1001") and
    grades as a third, unprivileged uid: the reset cleans both, and a root of any gid is
    cleaned as root (a plain kill -1 from uid 0 would reach the container's keeper)."""
    with open_sandbox("docker") as sb:
        r = sb.run("umask 027; mkdir /tmp/sealed && echo t > /tmp/sealed/f", user="0:1001")
        assert r.exit_code == 0, r.stderr
        assert sb.run("stat -c '%u:%g %a' /tmp/sealed", user=ROOT).stdout.split() == [
            "0:1001",
            "750",
        ]
        r = sb.run("cat /tmp/sealed/f && ! touch /tmp/sealed/g 2>/dev/null", user="1001:1001")
        assert (r.exit_code, r.stdout) == (0, "t\n"), r.stderr  # its group reads, never writes
        sb.start(["sleep", "300"], timeout=600, user="1001:1001")
        sb.start(["sleep", "300"], timeout=600, user="0:1001")
        container = sb.container_id
        sb.reset()
        assert sb.run("ls -A /tmp /workspace").stdout.split() == ["/tmp:", "/workspace:"]
        assert sb.container_id == container
        assert [p for p in processes(sb) if p[1] == "sleep"] == [("0", "sleep")]  # the keeper


def test_users_need_the_docker_backend_and_are_checked(dsb):
    with open_sandbox("local") as local:
        with pytest.raises(SandboxError, match="one user"):
            local.run("true", user=ROOT)
        with pytest.raises(SandboxError, match="background"):
            local.start("true")
    with pytest.raises(SandboxError, match="uid:gid"):
        dsb.run("true", user="root")
