"""What a pooled Docker sandbox's holder can leave, and what clears it (docs/sandbox.md's table).

One row of the table per test (the rows tested elsewhere say where). Each leaves its kind
of state in a pooled sandbox, hands the sandbox over, and checks what the next holder
finds: nothing of it, in the same container where the reset clears it, in a fresh one
where the reset's measurement found the container above its idle state. The module
shares one pool (one sandbox), so a row that keeps the container costs one exec.
"""

from __future__ import annotations

import pytest

from agentgym.sandbox import SandboxPool

from .conftest import skip_without_docker

skip_without_docker()
pytestmark = pytest.mark.docker

ROOT = "0:0"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(size=1, backend="docker", prune=False) as p:
        yield p


def hand_over(pool, leave: str, user: str | None = None):
    """Leave state with ``leave`` (a shell command), release, and acquire again: the
    next holder's sandbox and whether it is the same container."""
    sb = pool.acquire()
    first = sb.container_id
    r = sb.run(leave, user=user)
    assert r.exit_code == 0, (leave, r.stdout, r.stderr)
    pool.release(sb)
    sb = pool.acquire()
    try:
        sb.run("true")  # the reset runs in the first exec
        return sb, sb.container_id == first
    finally:
        pool.release(sb)


def test_system_v_ipc_of_every_kind_is_gone_in_the_same_container(pool):
    """Segments (one kept attached by a detached process, one left with no process),
    semaphore sets and message queues, as the sandbox user and as another uid."""
    leave = (
        "ipcmk -M 65536 && ipcmk -S 2 && ipcmk -Q && "
        "python3 -c 'import ctypes, os, time\n"
        "libc = ctypes.CDLL(None)\n"
        "libc.shmat.restype = ctypes.c_void_p\n"
        "sid = libc.shmget(0x4147, 65536, 0o1666)\n"
        "libc.shmat(sid, None, 0)\n"
        "if os.fork() == 0:\n"
        "    os.setsid(); time.sleep(600)\n' &"
        " sleep 0.5; test $(($(wc -l < /proc/sysvipc/shm) + $(wc -l < /proc/sysvipc/sem)"
        " + $(wc -l < /proc/sysvipc/msg))) -ge 6"
    )
    sb, same = hand_over(pool, leave)
    assert same
    ipc = sb.run("tail -n +2 -q /proc/sysvipc/shm /proc/sysvipc/sem /proc/sysvipc/msg")
    assert ipc.stdout == "", ipc.stdout
    sb, same = hand_over(pool, "ipcmk -S 1 && ipcmk -Q && ipcmk -M 4096", user="1001:1001")
    assert same
    assert sb.run("tail -n +2 -q /proc/sysvipc/sem /proc/sysvipc/msg").stdout == ""


def test_posix_message_queues_are_gone(pool):
    leave = "python3 -c \"open('/dev/mqueue/left', 'w')\" && ls /dev/mqueue | grep -q left"
    sb, same = hand_over(pool, leave)
    assert same and sb.run("ls -A /dev/mqueue").stdout == ""


#: what a holder could try on the workspace's mount root, which outlives every holder: its
#: mode, an ACL that shuts the grader's uid out, an extended attribute holding data, times
#: that carry data; each prints what became of it
WORKSPACE_ROOT = r"""
import os, struct
def entry(tag, perm, uid):
    return struct.pack("<HHI", tag, perm, uid & 0xFFFFFFFF)
acl = struct.pack("<I", 2) + entry(1, 7, -1) + entry(2, 0, 1001) + entry(4, 5, -1)
acl += entry(0x10, 5, -1) + entry(0x20, 5, -1)
for name, act in [
    ("chmod", lambda: os.chmod("/workspace", 0o700)),
    ("acl", lambda: os.setxattr("/workspace", "system.posix_acl_access", acl)),
    ("xattr", lambda: os.setxattr("/workspace", "user.left", b"data")),
    ("utime", lambda: os.utime("/workspace", (1234567, 7654321))),
]:
    try:
        act()
        print(name, "done")
    except OSError as e:
        print(name, e.strerror)
"""


def test_the_workspace_root_cannot_be_changed(pool):
    """The mount root is root's and sticky (as /tmp): no holder can change its mode, set
    an ACL or an attribute on it, or set its times; every user can enter it."""
    sb = pool.acquire()
    try:
        r = sb.run(["python3", "-c", WORKSPACE_ROOT])
        assert r.stdout.split("\n")[:4] == [
            "chmod Operation not permitted",
            "acl Operation not permitted",
            "xattr Operation not permitted",
            "utime Operation not permitted",
        ], r
        st = sb.run("stat -c '%a %u:%g' /workspace").stdout.split()
        assert st == ["1777", "0:0"], st
        assert sb.run("touch mine && ls /workspace", user="1001:1001").exit_code == 0
    finally:
        pool.release(sb)


def test_memory_held_where_no_clean_reaches_replaces_the_container(pool):
    """32 MiB in a file of the container's ``/dev`` (a tmpfs only root can write, which
    no clean empties): the reset's measurement finds the container above its idle
    footprint and the next holder gets a fresh one."""
    sb, same = hand_over(pool, "head -c 33554432 /dev/zero > /dev/held", user=ROOT)
    assert not same
    assert sb.run("ls /dev/held").exit_code != 0


def test_a_process_the_reset_cannot_kill_replaces_the_container(pool):
    """A process of a uid that never ran a command through the sandbox (started by the
    engine behind its back) is found by the reset's look at every process."""
    from agentgym.sandbox import docker_client

    sb = pool.acquire()
    first = sb.container_id
    api = docker_client().api
    run = api.exec_create(first, ["sleep", "600"], user="4242:4242")
    api.exec_start(run, detach=True)
    pool.release(sb)
    sb = pool.acquire()
    try:
        sb.run("true")
        assert sb.container_id != first
        assert "4242" not in sb.run("cat /proc/[0-9]*/status | grep ^Uid", user=ROOT).stdout
    finally:
        pool.release(sb)


#: a keyctl system call (join a new session keyring): 0 if keyrings can be used
KEYCTL = (
    "import ctypes, os, platform\n"
    "n = {'x86_64': 250, 'aarch64': 219}[platform.machine()]\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "print(libc.syscall(n, 1, 0), os.strerror(ctypes.get_errno()))\n"
)


def test_what_no_holder_can_leave():
    """Mounts (no process holds CAP_SYS_ADMIN; Docker's seccomp profile refuses new user
    namespaces), kernel keyrings (it refuses keyctl) and the modes of the shared places
    (root's: only the owner, or CAP_FOWNER, may change them)."""
    with SandboxPool(size=1, backend="docker", prune=False) as own, own.sandbox() as sb:
        before = sb.run("cat /proc/self/mountinfo").stdout
        for user in (None, ROOT):
            r = sb.run(
                "mount -t tmpfs none /tmp || unshare -m -r true || unshare -U true", user=user
            )
            assert r.exit_code != 0, r
        assert sb.run("cat /proc/self/mountinfo").stdout == before
        assert sb.run(["python3", "-c", KEYCTL]).stdout == "-1 Operation not permitted\n"
        for place in ("/tmp", "/dev/shm", "/dev/mqueue"):
            assert sb.run(f"chmod 700 {place}").exit_code != 0, place


def test_the_writable_layer_of_a_writable_root_replaces_the_container():
    """With ``read_only_root=False`` the image's own directories can be written
    (``/var/tmp``, ``/run/lock``): a container whose writable layer changed is replaced."""
    with SandboxPool(size=1, backend="docker", prune=False, read_only_root=False) as own:
        sb, same = hand_over(own, "echo left > /var/tmp/left")
        assert not same
        assert sb.run("ls /var/tmp").stdout == ""
        sb, same = hand_over(own, "echo fine > /workspace/f")
        assert same  # only the emptied places were written: the container stays
