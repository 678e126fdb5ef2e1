"""The local backend at every isolation level this machine offers.

What each level is expected to stop is in ``agentgym.sandbox.local``'s docstring;
the tests below check exactly that: the attacks every level stops run at every level, the
namespace ones (network, leftovers after a setsid escape) only at ``bwrap`` and
``unshare``, the filesystem ones only at ``bwrap``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import uuid

import pytest

from agentgym.errors import ConfigError
from agentgym.sandbox import (
    LOCAL_LEVELS,
    SandboxPathError,
    SandboxPool,
    available_levels,
    best_level,
    open_sandbox,
)

AVAILABLE = [level for level, why in available_levels().items() if why is None]
NAMESPACED = [level for level in AVAILABLE if level in ("bwrap", "unshare")]


@pytest.fixture(params=AVAILABLE)
def lsb(request):
    with open_sandbox("local", level=request.param, timeout=20) as sb:
        assert sb.backend == "local" and sb.isolation == request.param
        yield sb


def marked_processes(marker: str) -> int:
    """Live host processes whose command line contains ``marker`` (zombies have none)."""
    n = 0
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != os.getpid():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        n += 1
            except OSError:
                continue
    return n


def mark() -> str:
    return "agm" + uuid.uuid4().hex[:12]


def test_levels_are_reported_and_rlimits_always_works():
    levels = available_levels()
    assert set(levels) == set(LOCAL_LEVELS)
    assert levels["rlimits"] is None
    assert best_level() == AVAILABLE[0]
    with pytest.raises(ConfigError, match="level"):
        open_sandbox("local", level="chroot")


def test_files_round_trip_and_run(lsb):
    lsb.write_files(
        {"pkg/mod.py": "VALUE = 42\n", "main.py": "from pkg.mod import VALUE\nprint(VALUE)"}
    )
    assert lsb.list_files() == ["main.py", "pkg/mod.py"]
    assert lsb.read_file("pkg/mod.py") == "VALUE = 42\n"
    r = lsb.run("python3 main.py")
    assert (r.exit_code, r.stdout, r.timed_out) == (0, "42\n", False)
    r = lsb.run("echo out; echo err >&2; exit 5")
    assert (r.exit_code, r.stdout, r.stderr) == (5, "out\n", "err\n")
    assert lsb.run("tr a-z A-Z", stdin="shout\n").stdout == "SHOUT\n"
    assert lsb.run("echo $X", env={"X": "y"}).stdout == "y\n"
    assert lsb.run("ls", cwd="pkg").stdout == "mod.py\n"
    # files written by commands are visible to the API and vice versa
    assert lsb.run("echo made > made.txt").ok
    assert lsb.read_file("made.txt") == "made\n"


def test_run_waits_for_a_command_that_closed_its_output(lsb):
    r = lsb.run("exec >&- 2>&-; sleep 0.3; echo done > late.txt")
    assert r.exit_code == 0 and not r.timed_out
    assert lsb.read_file("late.txt") == "done\n"


def test_path_traversal_is_refused(lsb):
    for bad in ("/etc/passwd", "../x", "a/../../x"):
        with pytest.raises(SandboxPathError):
            lsb.write_files({bad: "x"})
        with pytest.raises(SandboxPathError):
            lsb.read_file(bad)
    assert lsb.run("ln -s /etc etc_link && ln -s /etc/hostname host_link").ok
    with pytest.raises(SandboxPathError, match="outside the workspace"):
        lsb.read_file("host_link")
    with pytest.raises(SandboxPathError, match="outside the workspace"):
        lsb.write_files({"etc_link/evil": "x"})
    assert not os.path.exists("/etc/evil")


def test_not_root(lsb):
    uid = int(lsb.run("id -u").stdout)
    assert uid != 0
    if lsb.isolation in ("bwrap", "unshare"):
        assert uid == 1000
        assert "CapEff:\t0000000000000000" in lsb.run("cat /proc/self/status").stdout


@pytest.mark.parametrize(
    "cmd",
    [
        "sleep 600",
        "while :; do :; done",
        "trap '' TERM; (trap '' TERM; sleep 600) & sleep 600",
    ],
    ids=["sleep", "busy", "ignores-sigterm"],
)
def test_timeouts_kill_the_command_and_its_children(lsb, cmd):
    m = mark()
    r = lsb.run(f": {m}; {cmd}", timeout=1)
    assert r.timed_out and r.exit_code == 137
    assert marked_processes(m) == 0


@pytest.mark.parametrize("level", NAMESPACED)
def test_setsid_escape_dies_with_the_pid_namespace(level):
    m = mark()
    with open_sandbox("local", level=level) as sb:
        escape = f"setsid sh -c ': {m}; trap \"\" TERM; sleep 600' >/dev/null 2>&1 & sleep 600"
        r = sb.run(escape, timeout=1)
        assert r.timed_out
        assert marked_processes(m) == 0
        # a background process left by a command that finished normally dies as well
        assert sb.run(f"setsid sh -c ': {m}; sleep 600' >/dev/null 2>&1 &").ok
        assert marked_processes(m) == 0


def test_output_flood_is_truncated(lsb):
    r = lsb.run("head -c 3000000 /dev/zero | tr '\\0' a; head -c 100000 /dev/zero | tr '\\0' b >&2")
    assert r.exit_code == 0
    assert r.stdout == "a" * 65536 and r.stdout_truncated
    assert r.stderr == "b" * 65536 and r.stderr_truncated


def test_memory_bomb_fails_inside_the_sandbox(lsb):
    with open_sandbox("local", level=lsb.isolation, memory_mb=256) as sb:
        r = sb.run(["python3", "-c", "a = []\nwhile True: a.append(bytearray(10**7))"], timeout=60)
    assert r.exit_code != 0 and not r.timed_out
    assert "MemoryError" in r.stderr


def test_fork_bomb_is_contained(lsb):
    m = mark()
    bomb = f"# {m}\nimport os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    with open_sandbox("local", level=lsb.isolation, pids=32) as sb:
        r = sb.run(["python3", "-c", bomb], timeout=3)
        assert r.timed_out
        assert subprocess.run(["true"], check=False).returncode == 0
        assert marked_processes(m) == 0
        assert sb.run("echo ok").stdout == "ok\n"


FORK_COUNTER = """
import os, sys, time
time.sleep(float(sys.argv[1]))
n = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
print(n)
"""


@pytest.mark.parametrize("level", NAMESPACED)
def test_process_limit_ignores_what_the_user_starts_elsewhere(level):
    """In a user namespace the limit counts the command's own tasks: ``pids`` of them, even
    when the sandbox user starts more processes on the host than ``pids`` while the
    command runs (a limit counted on the host would leave it none)."""
    uid = 65534 if os.geteuid() == 0 else None  # the user the sandbox runs commands as
    outside, result = [], {}
    with open_sandbox("local", level=level, pids=16) as sb:
        sb.write_files({"forks.py": FORK_COUNTER})
        # the command waits 1.5 s before it forks; meanwhile its user starts 48 processes
        cmd = threading.Thread(
            target=lambda: result.update(r=sb.run(["python3", "forks.py", "1.5"]))
        )
        cmd.start()
        try:
            outside += [subprocess.Popen(["sleep", "30"], user=uid) for _ in range(48)]
            cmd.join()
        finally:
            for p in outside:
                p.kill()
                p.wait()
    r = result["r"]
    assert r.exit_code == 0, r.stderr
    assert int(r.stdout) == 16 - 1  # the command itself is one of its 16 tasks


def test_file_size_limit(lsb):
    with open_sandbox("local", level=lsb.isolation, workspace_mb=1) as sb:
        r = sb.run("head -c 3000000 /dev/zero > big")
        assert r.exit_code != 0
        assert os.path.getsize(os.path.join(sb.workspace, "big")) <= 1024 * 1024


@pytest.mark.parametrize("level", NAMESPACED)
def test_network_is_blocked(level):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    probe = f"""
import errno, socket
names = [line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:]]
print(names)
s = socket.socket()
s.settimeout(5)
try:
    s.connect(("127.0.0.1", {port}))
    print("connected")
except OSError as e:
    print(errno.errorcode[e.errno])
"""
    try:
        with open_sandbox("local", level=level) as sb:
            r = sb.run(["python3", "-c", probe])
        try:
            server.accept()
            accepted = True
        except TimeoutError:
            accepted = False
    finally:
        server.close()
    names, outcome = r.stdout.split("\n")[:2]
    assert names == "['lo']", r.stderr
    # bwrap brings its private lo up (refused), unshare leaves it down (unreachable)
    assert outcome in ("ECONNREFUSED", "ENETUNREACH")
    assert not accepted


def test_bwrap_hides_the_host_filesystem():
    if "bwrap" not in AVAILABLE:
        pytest.skip("bubblewrap does not work on this machine")
    with open_sandbox("local", level="bwrap") as sb:
        r = sb.run("pwd; ls /; echo x > /usr/evil; echo x > /etc/evil; ls /root /home /var")
        lines = r.stdout.split("\n")
        assert lines[0] == "/workspace"
        assert "root" not in lines and "home" not in lines and "var" not in lines
        assert "Read-only file system" in r.stderr
        assert "/root" in r.stderr and "No such file" in r.stderr
        assert not os.path.exists("/usr/evil") and not os.path.exists("/etc/evil")


def test_bwrap_hides_agentgyms_own_files_when_they_live_in_usr(monkeypatch):
    """A wheel installed in /usr would show the environments' data (hidden tests) to
    commands; bwrap lays an empty tmpfs over agentgym's own directories."""
    if "bwrap" not in AVAILABLE:
        pytest.skip("bubblewrap does not work on this machine")
    from agentgym.sandbox.local import levels

    assert levels.hidden_dirs() == tuple(
        d for d in levels.hidden_dirs() if d.startswith(("/usr/", "/etc/", "/lib"))
    )
    stand_in = "/usr/share/doc"  # plays the installed package: it exists and has files
    assert os.listdir(stand_in)
    monkeypatch.setattr(levels, "hidden_dirs", lambda: (stand_in,))
    with open_sandbox("local", level="bwrap") as sb:
        r = sb.run(f"ls -A {stand_in} | wc -l; ls /usr/share | grep -cx doc")
    assert r.stdout.split() == ["0", "1"], r


def test_close_deletes_the_workspace_and_reset_empties_it():
    sb = open_sandbox("local")
    sb.write_files({"a/b.txt": "x"})
    sb.run("chmod 000 a; chmod 700 .")  # a holder closes what it made, and the workspace
    sb.reset()
    assert sb.list_files() == []
    assert os.stat(sb.workspace).st_mode & 0o777 == 0o755  # its mode back
    root = sb.workspace
    assert os.path.isdir(root)
    sb.close()
    assert not os.path.exists(root)
    sb.close()  # idempotent


def test_local_pool_hands_out_clean_sandboxes():
    with SandboxPool(size=1, backend="local") as pool:
        with pool.sandbox() as sb:
            first = sb
            sb.write_files({"secret.txt": "from the first holder"})
        with pool.sandbox() as sb:
            assert sb is first  # the same warm sandbox, reused
            assert sb.list_files() == []
            assert sb.run("ls -A").stdout == ""
