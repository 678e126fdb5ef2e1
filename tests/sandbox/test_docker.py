"""The Docker backend against a real engine: behaviour, limits and attacks."""

from __future__ import annotations

import socket
import subprocess
import threading
import time

import pytest

from agentgym.errors import SandboxError
from agentgym.sandbox import SandboxPathError, SandboxUnavailableError, docker_client, open_sandbox
from agentgym.sandbox.docker import LABEL

from .conftest import COUNT_USER_PROCS, skip_without_docker

skip_without_docker()
pytestmark = pytest.mark.docker


def leftover_processes(sb) -> int:
    r = sb.run(["python3", "-c", COUNT_USER_PROCS], timeout=30)
    assert r.exit_code == 0, r.stderr
    return int(r.stdout)


# -- the protocol -------------------------------------------------------------------------


def test_files_round_trip_and_run(dsb):
    dsb.write_files(
        {
            "pkg/mod.py": "VALUE = 6 * 7\n",
            "main.py": "from pkg.mod import VALUE\nprint(VALUE)\n",
            "blob.bin": bytes(range(256)),
        }
    )
    assert dsb.list_files() == ["blob.bin", "main.py", "pkg/mod.py"]
    assert dsb.read_bytes("blob.bin") == bytes(range(256))
    assert dsb.read_file("pkg/mod.py") == "VALUE = 6 * 7\n"
    r = dsb.run("python3 main.py")
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (0, "42\n", "", False)
    assert r.duration > 0
    # overwrite replaces the content
    dsb.write_files({"main.py": "print('v2')"})
    assert dsb.run(["python3", "main.py"]).stdout == "v2\n"


def test_exit_code_stderr_stdin_env_cwd(dsb):
    r = dsb.run("echo out; echo err >&2; exit 7")
    assert (r.exit_code, r.stdout, r.stderr) == (7, "out\n", "err\n")
    assert dsb.run("tr a-z A-Z", stdin="hello\n").stdout == "HELLO\n"
    assert dsb.run("cat", stdin=b"").stdout == ""
    assert dsb.run("echo $GREETING", env={"GREETING": "hi"}).stdout == "hi\n"
    dsb.write_files({"sub/dir/f.txt": "x"})
    assert dsb.run("pwd; ls", cwd="sub/dir").stdout == "/workspace/sub/dir\nf.txt\n"
    missing = dsb.run("pwd", cwd="nowhere")
    assert missing.exit_code == 2 and "no directory nowhere" in missing.stderr
    assert dsb.run(["sh", "-c", 'printf "%s|" "$@"', "x", "a b", "c"]).stdout == "a b|c|"


def test_run_waits_for_a_command_that_closed_its_output(dsb):
    r = dsb.run("exec >&- 2>&-; sleep 0.3; echo done > late.txt")
    assert r.exit_code == 0 and not r.timed_out
    assert dsb.read_file("late.txt") == "done\n"


def test_large_stdin_is_streamed_while_output_is_read(dsb):
    data = b"0123456789abcdef" * 65536  # 1 MiB in, 1 MiB back out
    r = dsb.run("cat", stdin=data, timeout=60)
    assert r.exit_code == 0 and not r.timed_out
    assert r.stdout_truncated and r.stdout.encode() == data[: 64 * 1024]


def test_sandbox_files_are_owned_by_the_sandbox_user(dsb):
    dsb.write_files({"a/b.txt": "x"})
    r = dsb.run("stat -c '%u %a' a a/b.txt; echo more >> a/b.txt && cat a/b.txt")
    assert r.stdout == "1000 755\n1000 644\nx" + "more\n"


# -- path rules -----------------------------------------------------------------------------


def test_path_traversal_is_refused_on_write_and_read(dsb):
    for bad in ("/etc/passwd", "../escape.txt", "a/../../x"):
        with pytest.raises(SandboxPathError):
            dsb.write_files({bad: "x"})
        with pytest.raises(SandboxPathError):
            dsb.read_file(bad)
    assert dsb.run("ln -s /etc etc_link; ln -s /etc/hostname host_link; ln -s . self").ok
    with pytest.raises(SandboxPathError, match="outside the workspace"):
        dsb.read_file("etc_link/passwd")
    with pytest.raises(SandboxPathError, match="outside the workspace"):
        dsb.read_file("host_link")
    with pytest.raises(SandboxPathError, match="outside the workspace"):
        dsb.write_files({"ok.txt": "fine", "etc_link/evil": "x"})
    # nothing of the refused batch was written
    assert "ok.txt" not in dsb.list_files()
    # a symlink that stays inside the workspace is fine
    dsb.write_files({"self/inside.txt": "in"})
    assert dsb.read_file("inside.txt") == "in"
    with pytest.raises(FileNotFoundError):
        dsb.read_file("missing.txt")
    with pytest.raises(SandboxPathError, match="directory"):
        dsb.read_file("self")


# -- isolation ------------------------------------------------------------------------------


def test_network_is_blocked(dsb):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    probe = f"""
import os, socket
print(sorted(os.listdir("/sys/class/net")))
print(len(open("/proc/net/route").read().splitlines()))
s = socket.socket()
s.settimeout(5)
try:
    s.connect(("127.0.0.1", {port}))
    print("connected")
except OSError as e:
    print(type(e).__name__)
"""
    try:
        r = dsb.run(["python3", "-c", probe], timeout=30)
        accepted = False
        try:
            server.accept()
            accepted = True
        except TimeoutError:
            pass
    finally:
        server.close()
    assert r.exit_code == 0, r.stderr
    ifaces, routes, outcome = r.stdout.split("\n")[:3]
    assert ifaces == "['lo']"  # no interface but the container's own loopback
    assert routes == "1"  # the routing table holds only its header: no route anywhere
    assert outcome == "ConnectionRefusedError"  # the host's server is not reachable
    assert not accepted


def test_not_root_no_capabilities_read_only_root(dsb):
    r = dsb.run(
        "id -u; id -g; grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status | tr -s '\\t' ' '"
    )
    assert r.stdout.split("\n")[:5] == [
        "1000",
        "1000",
        "CapPrm: 0000000000000000",
        "CapEff: 0000000000000000",
        "NoNewPrivs: 1",
    ]
    # /var/tmp is world-writable in the image: only the read-only mount stops the write
    w = dsb.run("echo x > /var/tmp/evil")
    assert w.exit_code != 0 and "Read-only file system" in w.stderr
    for target in ("/etc/evil", "/usr/evil", "/evil"):
        assert dsb.run(f"echo x > {target}").exit_code != 0, target
    root = dsb.run("awk '$2 == \"/\" {print $4}' /proc/mounts")
    assert root.stdout.split(",")[0] == "ro"
    assert dsb.run("echo x > /tmp/ok && echo x > /workspace/ok && cat /tmp/ok").stdout == "x\n"


def test_workspace_size_and_memory_are_bounded():
    with open_sandbox("docker", workspace_mb=8, memory_mb=128) as sb:
        full = sb.run("head -c 20000000 /dev/zero > big", timeout=30)
        assert full.exit_code != 0 and "No space left" in full.stderr
        assert sb.run("rm big").ok
        with pytest.raises(SandboxError, match="workspace is full"):
            sb.write_files({"big.bin": b"x" * 20_000_000})
        bomb = sb.run(
            ["python3", "-c", "a = []\nwhile True: a.append(bytearray(10**7))"], timeout=60
        )
        assert bomb.oom_killed and bomb.exit_code == 137 and not bomb.timed_out
        # a bomb in a child: the shell around it reports the failure, and the OOM
        child = sb.run(
            "python3 -c 'a = []\nwhile True: a.append(bytearray(10**7))'; echo after; exit 3",
            timeout=60,
        )
        assert child.oom_killed and child.exit_code == 3 and child.stdout == "after\n"
        # the sandbox survives and reports later deaths correctly
        assert sb.run("echo alive").stdout == "alive\n"
        assert not sb.run("exit 1").oom_killed
        suicide = sb.run("kill -9 $$")
        assert suicide.exit_code == 137 and not suicide.oom_killed and not suicide.timed_out


def test_fork_bomb_is_contained():
    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    with open_sandbox("docker", pids=48) as sb:
        limit = sb.run(
            "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max"
        )
        assert limit.stdout.strip() == "48"
        r = sb.run(["python3", "-c", bomb], timeout=3)
        assert r.timed_out and r.exit_code == 137
        # the host can still start processes
        assert subprocess.run(["true"], check=False).returncode == 0
        # every bomb process is gone and the sandbox still works
        assert leftover_processes(sb) == 0
        assert sb.run("echo ok").stdout == "ok\n"
        # a bomb that left the process group (and holds the output open) dies too
        code = bomb.replace("'", "")
        r = sb.run(f"setsid python3 -c '{code}' & sleep 600", timeout=2)
        assert r.timed_out
        assert leftover_processes(sb) == 0
        assert not sb.broken


@pytest.mark.parametrize(
    "cmd",
    [
        "sleep 600",
        "while :; do :; done",
        # ignores SIGTERM, and so does a child it leaves running in the background
        "trap '' TERM; (trap '' TERM; sleep 600) & sleep 600",
        # a child that leaves the process group (and keeps the output open)
        "setsid sh -c 'trap \"\" TERM; sleep 600' & sleep 600",
        # a child that leaves the process group with its output redirected
        "setsid sh -c 'sleep 600' >/dev/null 2>&1 & while :; do :; done",
    ],
    ids=["sleep", "busy", "ignores-sigterm", "setsid-escape", "setsid-quiet"],
)
def test_timeout_kills_everything(dsb, cmd):
    r = dsb.run(cmd, timeout=1)
    assert r.timed_out and r.exit_code == 137
    assert leftover_processes(dsb) == 0


def test_output_flood_is_truncated(dsb):
    r = dsb.run("head -c 5000000 /dev/zero | tr '\\0' a; head -c 300000 /dev/zero | tr '\\0' b >&2")
    assert r.exit_code == 0  # the rest was drained, not cut off with a broken pipe
    assert r.stdout == "a" * 65536 and r.stdout_truncated
    assert r.stderr == "b" * 65536 and r.stderr_truncated
    small = dsb.run("echo hi")
    assert not small.truncated


def test_custom_output_limit():
    with open_sandbox("docker", output_limit=100) as sb:
        r = sb.run("seq 1 1000")
        assert len(r.stdout) == 100 and r.stdout.startswith("1\n2\n3\n") and r.stdout_truncated


# -- lifecycle ------------------------------------------------------------------------------


def test_container_labels_and_removal_on_close_and_exception():
    import os

    api = docker_client().api
    with pytest.raises(RuntimeError, match="boom"), open_sandbox("docker") as sb:
        cid = sb.container_id
        labels = api.inspect_container(cid)["Config"]["Labels"]
        assert labels[LABEL] == "1"
        assert labels["agentgym.owner_pid"] == str(os.getpid())
        assert labels["agentgym.owner_host"] == socket.gethostname()
        assert labels["agentgym.created"]
        raise RuntimeError("boom")
    assert not api.containers(all=True, filters={"id": cid})
    with pytest.raises(SandboxError, match="closed"):
        sb.run("true")


def test_close_during_a_run_ends_it_with_an_error():
    sb = open_sandbox("docker")
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(sb.run("sleep 60", timeout=120))
        except SandboxError as e:
            outcome.append(e)

    worker = threading.Thread(target=run)
    worker.start()
    api = docker_client().api
    for _ in range(600):  # wait until the command runs in the container
        if any("sleep 60" in " ".join(p) for p in api.top(sb.container_id)["Processes"]):
            break
        time.sleep(0.05)
    sb.close()
    worker.join(timeout=60)
    assert len(outcome) == 1 and isinstance(outcome[0], SandboxError)
    assert "closed while the command ran" in str(outcome[0])


def test_one_sandbox_serialises_threads(dsb):
    results = []

    def work(i: int) -> None:
        dsb.write_files({f"t{i}.txt": str(i)})
        results.append(dsb.run(f"cat t{i}.txt").stdout)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["0", "1", "2", "3"]


def test_auto_picks_docker_and_missing_image_says_how_to_fix():
    with open_sandbox("auto") as sb:
        assert sb.backend == "docker"
    with pytest.raises(SandboxUnavailableError, match="build-image"):
        open_sandbox("docker", image="agentgym-sandbox:does-not-exist")
