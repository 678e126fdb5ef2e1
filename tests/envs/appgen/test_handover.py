"""Nothing one AppGen episode leaves in its sandboxes reaches another episode (issue 43).

Each attack is played through the env, on the real Docker sandbox, with a pool of one
sandbox (``pool_size=1``), so that wherever sandboxes are shared between episodes the
next episode gets the very container the attacker used. Every class the issue's red team
found:

* **the leak**: a graded project (the reference solution plus a recorder) logs the inputs
  the hidden tests give it into a System V shared-memory segment, kept alive by a detached
  process; the next episode's agent reads every segment it can find;
* **the squat by an agent command**: an agent fills its container's memory with System V
  segments and leaves 16 MiB free;
* **the squat by a graded project**: the reference solution leaves a detached helper that
  waits for the grader to exit, then squats the same way (the attacker keeps its 1.0);
* **``chmod 700 /workspace``** by an agent.

After each, an honest episode (the reference solution, written in one reply) must score
what it scores alone (1.0), and the next agent must see nothing of the attacker. The
helper-module shadow is in ``test_grader_boundary.py``; the reset's rows one by one in
``tests/sandbox/test_reset.py``.
"""

from __future__ import annotations

import time

import gymnasium as gym
import pytest

from agentgym.envs.appgen.grading import grade
from agentgym.envs.appgen.taskset import BUILTIN_TASKS_DIR, AppTask, load_task

from .conftest import need_docker

pytestmark = pytest.mark.docker

TASK = "expr_calc"

#: System V shared memory through ctypes (the image's python3 has no module for it)
SYSV = r"""
import ctypes, os, time
_libc = ctypes.CDLL(None, use_errno=True)
_libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
_libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
_libc.shmat.restype = ctypes.c_void_p
_libc.shmdt.argtypes = [ctypes.c_void_p]
KEY, SIZE = 0x41474C4B, 1 << 16


def attach(key, size, flags):
    sid = _libc.shmget(key, size, flags)
    if sid < 0:
        return None
    addr = _libc.shmat(sid, None, 0)
    return None if addr in (None, ctypes.c_void_p(-1).value) else addr


def queue_put(text):
    # one message on the System V message queue KEY
    qid = _libc.msgget(KEY, 0o1666)
    data = text.encode()[:4000]
    msg = ctypes.create_string_buffer(8 + len(data))
    ctypes.memmove(ctypes.addressof(msg), (1).to_bytes(8, "little"), 8)
    ctypes.memmove(ctypes.addressof(msg) + 8, data, len(data))
    _libc.msgsnd(qid, msg, len(data), 0o4000)  # IPC_NOWAIT


def queue_take(qid):
    # every message on queue qid, taken off it
    out = []
    msg = ctypes.create_string_buffer(8 + 4096)
    while True:
        n = _libc.msgrcv(qid, msg, 4096, 0, 0o4000 | 0o10000)  # IPC_NOWAIT | MSG_NOERROR
        if n < 0:
            return out
        out.append(msg.raw[8 : 8 + n].decode("utf-8", "replace"))


def detached(fn):
    # run fn in a grandchild in a session of its own (it outlives the caller's group)
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            try:
                fn()
            finally:
                os._exit(0)
        os._exit(0)
    os.waitpid(pid, 0)


def memory_left():
    # bytes the container may still use that no kill and no reclaim gives back
    base = "/sys/fs/cgroup/memory/" if os.path.isdir("/sys/fs/cgroup/memory") else "/sys/fs/cgroup/"
    stat = dict(line.split() for line in open(base + "memory.stat"))
    if os.path.exists(base + "memory.limit_in_bytes"):
        used = int(stat["total_rss"]) + int(stat["total_shmem"])
        return int(open(base + "memory.limit_in_bytes").read()) - used
    used = int(stat["anon"]) + int(stat["shmem"])
    return int(open(base + "memory.max").read()) - used


def squat(leave=16 << 20, chunk=4 << 20):
    # fill the container's memory with segments, leaving `leave` bytes, and hold them
    held = []
    while memory_left() > leave + chunk:
        addr = attach(0, chunk, 0o1600)
        if addr is None:
            break
        ctypes.memset(addr, 1, chunk)
        held.append(addr)
    return held
"""

#: the recorder, appended to the graded project's package: every input ``evaluate`` gets
#: goes on a message queue and into a segment, which a detached process keeps attached
RECORDER = (
    SYSV
    + r"""
import sys, threading


def _note(text):
    queue_put("REC:" + text)
    addr = attach(KEY, SIZE, 0o1666)
    if addr is None:
        return
    buf = ctypes.string_at(addr, SIZE)
    used = buf.find(b"\0")
    data = ("REC:" + text + "\n").encode()[: max(0, SIZE - used - 1)]
    ctypes.memmove(addr + used, data, len(data))


def _profile(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "evaluate":
        try:
            _note(repr(frame.f_locals.get("text")))
        except Exception:
            pass


def _hold():
    attach(KEY, SIZE, 0o1666)
    while True:
        time.sleep(60)


detached(_hold)
sys.setprofile(_profile)
"""
)

#: what the next agent runs: every System V segment it can attach and every message on
#: every queue it can read, printed
PEEK = (
    SYSV
    + r"""
found = []
for line in open("/proc/sysvipc/shm").read().splitlines()[1:]:
    sid = int(line.split()[1])
    addr = _libc.shmat(sid, None, 0o10000)
    if addr not in (None, ctypes.c_void_p(-1).value):
        found.append(ctypes.string_at(addr, 4096).split(b"\0")[0].decode("utf-8", "replace"))
for line in open("/proc/sysvipc/msg").read().splitlines()[1:]:
    found += queue_take(int(line.split()[1]))
print("segments and messages:", len(found))
print("\n".join(found))
"""
)

#: an agent's command: squat the container's memory, then leave its holder behind
AGENT_SQUAT = (
    SYSV
    + r"""
detached(lambda: (squat(), time.sleep(3600)))
deadline = time.time() + 20
while memory_left() > 24 << 20 and time.time() < deadline:
    time.sleep(0.1)
print("left", memory_left())
"""
)

#: appended to the graded project: a detached helper waits for the grader (uid 1001) to
#: exit, then squats the container's memory and holds it
GRADED_SQUAT = (
    SYSV
    + r"""
def _grader_alive():
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and "\nUid:\t1001\t" in open("/proc/%s/status" % p).read():
                return True
        except OSError:
            pass
    return False


def _wait_then_squat():
    while _grader_alive():
        time.sleep(0.05)
    squat()
    time.sleep(3600)


if not os.environ.get("AGENTGYM_SQUATTER"):
    os.environ["AGENTGYM_SQUATTER"] = "1"
    detached(_wait_then_squat)
"""
)


@pytest.fixture(scope="module")
def task() -> AppTask:
    need_docker()
    return load_task(BUILTIN_TASKS_DIR / TASK)


@pytest.fixture(scope="module")
def env():
    """One env for the module, on a pool of one sandbox: where episodes share sandboxes,
    each gets the container the previous one used."""
    need_docker()
    e = gym.make("agentgym/AppGen-v0", sandbox="docker", tasks=[TASK], pool_size=1)
    yield e
    e.close()


def writes(files: dict[str, bytes]) -> str:
    return "".join(f'<write path="{p}">\n{d.decode()}</write>\n' for p, d in sorted(files.items()))


def with_package_code(task: AppTask, code: str) -> dict[str, bytes]:
    """The reference solution with ``code`` appended to its package's ``__init__.py``."""
    files = task.reference_files()
    init = "calc/__init__.py"
    files[init] = files.get(init, b"") + b"\n" + code.encode()
    return files


def episode(env, reply: str, then: str = "<submit/>") -> tuple[float, dict, str]:
    """One episode: ``reply``, then ``then`` (graded at the submit); the reward, the
    breakdown and the text of every observation after the first."""
    env.reset(seed=0)
    seen = []
    obs, reward, terminated, truncated, info = env.step(reply)
    seen.append(obs[-1].content)
    if not (terminated or truncated):
        obs, reward, terminated, truncated, info = env.step(then)
        seen.append(obs[-1].content)
    assert terminated or truncated, seen
    return reward, info["reward_breakdown"], "\n".join(seen)


def honest(env, task: AppTask) -> float:
    reward, breakdown, _ = episode(env, writes(task.solution) + "<submit/>")
    return reward


def first_look(env) -> str:
    """A new episode whose agent runs PEEK and ``ipcs`` first thing; what it was told."""
    env.reset(seed=0)
    obs, *_ = env.step(f"{writes({'peek.py': PEEK.encode()})}<run>python3 peek.py; ipcs</run>")
    text = obs[-1].content
    assert "segments and messages:" in text, text
    return text


def test_hidden_inputs_a_graded_project_records_never_reach_the_next_agent(env, task):
    rigged = with_package_code(task, RECORDER)
    # the recorder works: read before any reset, its queue holds hidden-only inputs
    from agentgym.sandbox import open_sandbox

    with open_sandbox("docker", timeout=120, memory_mb=512, pids=128) as sb:
        alone = grade(task, rigged, sb)
        recorded = sb.run(["python3", "-c", PEEK]).stdout
    assert alone.score == 1.0, alone.errors
    assert "REC:'2^3^2'" in recorded and "REC:'5 % 0'" in recorded, recorded
    reward, _, _ = episode(env, writes(rigged) + "<submit/>")
    assert reward == 1.0
    seen = first_look(env)
    assert "REC:" not in seen and "2^3^2" not in seen, seen
    assert "0x41474c4b" not in seen, seen  # not even the recorder's (empty) segment


def test_an_agent_that_squats_memory_zeroes_no_other_episode(env, task):
    squatter = writes({"squat.py": AGENT_SQUAT.encode()}) + "<run>python3 squat.py</run>"
    _, _, told = episode(env, squatter)
    left = int(told.split("left ")[1].split()[0])
    assert left < 24 << 20, told  # the squat held: under 24 MiB left in that container
    assert honest(env, task) == 1.0


def test_a_helper_left_by_a_graded_project_zeroes_no_other_episode(env, task):
    reward, breakdown, _ = episode(env, writes(with_package_code(task, GRADED_SQUAT)) + "<submit/>")
    assert reward == 1.0, breakdown["errors"]  # the attacker keeps its own score
    time.sleep(2)  # the gap before the next holder: the helper squats meanwhile
    assert honest(env, task) == 1.0


#: an agent's command: shut the grader's uid (1001) out of the workspace with an ACL
ACL_1001 = r"""
import os, struct
def entry(tag, perm, uid):
    return struct.pack("<HHI", tag, perm, uid & 0xFFFFFFFF)
acl = struct.pack("<I", 2) + entry(1, 7, -1) + entry(2, 0, 1001) + entry(4, 5, -1)
acl += entry(0x10, 5, -1) + entry(0x20, 5, -1)
for path in ("/workspace", "/workspace/calc"):
    try:
        os.setxattr(path, "system.posix_acl_access", acl)
    except OSError as e:
        print(path, e.strerror)
"""


@pytest.mark.parametrize("close", ["chmod 700", "an ACL"])
def test_a_workspace_closed_to_others_zeroes_no_other_episode(env, task, close: str):
    """The agent closes its workspace to every other uid, and its episode ends without a
    grading (abandoned: the env is reset), so the next holder of that workspace is not its
    own grading, which would find the workspace closed and score the attacker 0."""
    env.reset(seed=0)
    if close == "chmod 700":
        env.step("<run>chmod 700 /workspace; chmod 700 /workspace/calc</run>")
    else:
        env.step(writes({"acl.py": ACL_1001.encode()}) + "<run>python3 acl.py</run>")
    assert honest(env, task) == 1.0


def test_every_episode_plays_in_a_container_no_one_held(env):
    """What no reset clears (the container's counters of processes started and memory
    used, its next pid) reaches no agent: each episode's workspace is a container no one
    held before, and gradings have containers of their own."""
    seen = []
    for _ in range(3):
        env.reset(seed=0)
        seen.append(env.unwrapped._sandbox.container_id)
    with env.unwrapped._grading_pool.sandbox() as sb:
        grading = sb.container_id
    assert len(set(seen)) == 3 and grading not in seen
