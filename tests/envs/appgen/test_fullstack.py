"""Full-stack AppGen tasks on the real Docker sandbox: servers, browser, services, stages.

* the oracle scores 1.0 on every full-stack task over several conversations and the bare
  scaffold 0 (both ``slow``: 12 gradings each, with Chromium); on three tasks the scaffold
  scores 0 and a half-built project partial credit;
* a staged task played by an agent that forgets the first request's preferences in the
  second conversation loses reward, and the breakdown names the lost requirements;
* the boundary around the app, seen from the app itself (a task written here whose
  server probes its surroundings): the sandbox user, no network beyond loopback, the
  grader's files and processes out of reach, no browser port; what one test's app leaves
  running is gone before the next test, and the sandbox's reset leaves nothing;
* an app that never answers fails its tests within the task's limits.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest

from agentgym.envs.appgen import grade, load_task, load_tasks
from agentgym.policies import OraclePolicy
from agentgym.rollouts import rollout

from .conftest import need_docker

pytestmark = pytest.mark.docker

ENV_ID = "agentgym/AppGen-v0"
TASKS = {t.name: t for t in load_tasks()}
FULLSTACK = sorted(n for n, t in TASKS.items() if t.app is not None)
STAGED = sorted(n for n, t in TASKS.items() if t.staged)


@pytest.fixture(autouse=True)
def _docker():
    need_docker()


def docker_sandbox(task):
    from agentgym.sandbox import open_sandbox

    return open_sandbox("docker", timeout=float(task.limits.grade_timeout), **task.limits.sandbox())


def test_the_fullstack_set():
    assert len(FULLSTACK) >= 12 and len(TASKS) >= 24
    assert {TASKS[n].difficulty for n in FULLSTACK} == {"easy", "medium", "hard"}
    assert all(TASKS[n].app.browser for n in FULLSTACK)
    assert {s.name for n in FULLSTACK for s in TASKS[n].services} >= {
        "weather",
        "rates",
        "calendar",
        "mail",
    }
    assert "outfit_planner" in STAGED and len(STAGED) >= 3
    for name in STAGED:
        task = TASKS[name]
        assert task.forgetful, name
        assert {r.stage for r in task.requirements} == set(range(1, len(task.stages) + 1))


@pytest.mark.slow
def test_oracle_scores_one_on_every_fullstack_task():
    episodes = rollout(
        ENV_ID,
        OraclePolicy(),
        seeds=range(len(FULLSTACK)),
        concurrency=2,
        env_kwargs={"sandbox": "docker", "tasks": FULLSTACK},
    )
    assert sorted(e.reward_breakdown["task"] for e in episodes) == FULLSTACK
    for ep in episodes:
        b = ep.reward_breakdown
        assert ep.reward == 1.0, (b["task"], b["errors"], b["per_test"])
        assert b["end_reason"] == "done" and b["stages_submitted"] == b["stages"]
        # every request starts a conversation, and the first needs more than one
        assert ep.num_conversations >= (b["stages"] + 1 if b["stages"] > 1 else 2)
        assert all(r["met"] for r in b["requirements"].values()), b["task"]
        assert ep.metrics["grade_seconds"] > 0


@pytest.mark.slow
def test_the_scaffold_scores_zero_on_every_fullstack_task():
    with docker_sandbox(TASKS["outfit_planner"]) as sb:  # the largest limits of the set
        for name in FULLSTACK:
            task = TASKS[name]
            bare = grade(task, task.initial_files(), sb)
            sb.reset()
            assert bare.total == task.num_hidden_tests > 0, name
            assert bare.passed == 0 and not bare.tampered, (name, bare.per_test)


def _short_page_waits(name: str, root: Path, seconds: int = 3):
    """The task, copied under ``root`` with ``[app] page_timeout = seconds``: a page test
    of a project that lacks the page fails after that long, not the default 10 s."""
    dest = root / name
    shutil.copytree(TASKS[name].path, dest)
    toml = dest / "task.toml"
    toml.write_text(toml.read_text().replace("[app]\n", f"[app]\npage_timeout = {seconds}\n"))
    task = load_task(dest)
    assert task.app.page_timeout == seconds
    return task


@pytest.mark.parametrize("name", ["bookmarks", "guestbook", "outfit_planner"])
def test_scaffold_scores_zero_and_half_built_projects_partial_credit(name, tmp_path):
    task = _short_page_waits(name, tmp_path)  # the half-built projects' page tests wait
    half = task.initial_files()
    for path in task.oracle_order[: len(task.oracle_order) // 2]:
        half[path] = task.solution[path]
    with docker_sandbox(task) as sb:
        bare = grade(task, task.initial_files(), sb)
        sb.reset()
        partial = grade(task, half, sb)
    assert bare.passed == 0 and bare.total == task.num_hidden_tests and not bare.tampered
    assert 0 < partial.passed < partial.total, partial.per_test
    assert not partial.tampered and not partial.timed_out


def _forgetful_actor(task):
    """The oracle, but the second request's conversation overwrites the first request's
    work with the task's forgetful files before the final submit."""

    def act(env, obs):
        action = env.unwrapped.oracle_action(obs)
        if "<submit/>" in action and "project is complete" in action:
            writes = "".join(
                f'<write path="{p}">\n{d.decode()}</write>\n' for p, d in task.forgetful.items()
            )
            action = writes + action
        return action

    return act


def test_forgetting_the_first_requests_preferences_loses_them():
    task = TASKS["habit_tracker"]
    env = gym.make(ENV_ID, sandbox="docker", tasks=[task.name])
    act = _forgetful_actor(task)
    try:
        obs, info = env.reset(seed=0)
        task_prompts = set()  # the first user message of every conversation
        while True:
            task_prompts.add(obs[1].content)
            obs, reward, terminated, truncated, info = env.step(act(env, obs))
            if terminated or truncated:
                break
    finally:
        env.close()
    b = info["reward_breakdown"]
    stage1 = {r.name for r in task.requirements if r.stage == 1}
    lost = {n for n, r in b["requirements"].items() if not r["met"]}
    assert 0 < reward < 1.0 and b["stages_submitted"] == 2
    assert lost and lost <= stage1, b["requirements"]
    assert all(line.split(" (stage 1)")[0] in lost for line in b["lost_requirements"])
    # request 2 came in a conversation that does not repeat request 1
    request1, request2 = task.stages[0].text.strip(), task.stages[1].text.strip()
    later = [p for p in task_prompts if request2[:60] in p]
    assert later and all(request1[:60] not in p for p in later)
    assert b["conversations"] >= 3


# -- the boundary around the app, probed from inside it -------------------------------------

PROBE_MAIN = """\
import glob, json, os, socket, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LEFTOVER_PORT = 47123


def reachable(host, port):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


LEFTOVER = reachable("127.0.0.1", LEFTOVER_PORT)  # before this app spawns anything


def probe():
    out = {"uid": os.getuid(), "leftover": LEFTOVER}
    out["outside"] = [h for h in ("1.1.1.1", "10.0.0.1", "172.17.0.1") if reachable(h, 80)]
    try:
        socket.getaddrinfo("example.com", 80)
        out["dns"] = True
    except OSError:
        out["dns"] = False
    out["grader_dirs"] = glob.glob("/tmp/.agentgym-sealed/*") + glob.glob("/tmp/.agentgym-g*")
    listed = []
    for d in out["grader_dirs"]:
        try:
            listed.append(os.listdir(d))
        except OSError:
            pass
    out["listed"] = listed
    signalled, others = [], 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat("/proc/" + pid).st_uid == os.getuid():
                continue
            others += 1
            os.kill(int(pid), 0)
            signalled.append(pid)
        except OSError:
            pass
    out["signalled"], out["others"] = signalled, others
    ports = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(name) as f:
            for line in f.read().splitlines()[1:]:
                cols = line.split()
                if cols[3] == "0A":
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    out["listening"] = sorted(ports)
    data = os.environ["DATA_DIR"]
    work = os.path.dirname(data)
    out["modes"] = [os.stat(d).st_mode & 0o7777 for d in (data, work, os.path.dirname(work))]
    try:
        os.listdir(os.path.dirname(work))
        out["scratch_listed"] = True
    except OSError:
        out["scratch_listed"] = False
    return out


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        body = json.dumps(probe() if self.path == "/probe" else {"ok": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if os.environ.get("SPAWN_DAEMON"):
    # a detached daemon in its own session that keeps a port: it outlives this app
    subprocess.Popen(
        [sys.executable, "-c", "import socket, time; s = socket.socket(); "
         f"s.bind(('127.0.0.1', {LEFTOVER_PORT})); s.listen(); time.sleep(3600)"],
        start_new_session=True, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    while not reachable("127.0.0.1", LEFTOVER_PORT):
        time.sleep(0.05)
ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""

PROBE_TESTS = """\
def test_a_daemon_is_left_behind(app):
    app.stop()
    app.extra_env["SPAWN_DAEMON"] = "1"
    app.start()
    assert app.get("/").json() == {"ok": True}
    app.restart()  # the daemon outlives its app (its own session): the probe sees it
    assert app.get("/probe").json()["leftover"] is True


def test_the_app_is_walled_in(app, services, page):
    page.goto(app.url + "/")  # the browser runs now
    assert "ok" in page.text("body")
    p = app.get("/probe").json()
    assert p["uid"] != 0, p
    assert p["leftover"] is False, "the previous test's daemon still held its port"
    assert p["outside"] == [] and p["dns"] is False, p
    # the sealed directory's parent cannot be entered (issue 43): its name is not found
    assert p["grader_dirs"] == [] and p["listed"] == [], "the app found the grader's directory"
    assert p["others"] > 0 and p["signalled"] == [], "the app could signal the grader's processes"
    service_port = int(services["echo"].url.rsplit(":", 1)[1])
    assert set(p["listening"]) <= {app.port, service_port}, p["listening"]
    assert services["echo"].calls() == []
    # DATA_DIR and the app's directory: shared and sticky, made with that mode; the grader's
    # scratch above them can be entered, not listed or written
    assert p["modes"] == [0o1777, 0o1777, 0o711] and p["scratch_listed"] is False, p
"""


def _probe_task(root: Path, main: str, startup_timeout: int = 15, tests: str = PROBE_TESTS) -> Path:
    task = root / "walled_in"
    files = {
        "task.toml": f"""\
            title = "The app probes its surroundings"
            difficulty = "easy"

            [limits]
            grade_timeout = 120
            test_timeout = 40
            memory_mb = 1024
            pids = 512

            [app]
            command = "python3 -m walled_in"
            ready_path = "/"
            startup_timeout = {startup_timeout}
            browser = true

            [services.echo]
            fixture = "fixtures/echo.json"
            """,
        "spec.md": "A server that reports what it can reach.\n",
        "scaffold/walled_in/__init__.py": "",
        "tests_hidden/fixtures/echo.json": json.dumps(
            {"routes": [{"path": "/ping", "json": {"pong": True}}]}
        ),
        "tests_hidden/test_walls.py": tests,
        "solution/walled_in/__init__.py": "",
        "solution/walled_in/__main__.py": main,
        "solution/walled_in/notes.txt": "the probe needs no more files\n",
    }
    for rel, text in files.items():
        path = task / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text) if rel == "task.toml" else text)
    return task


def _processes(sb) -> list[str]:
    """Command lines of every process in the sandbox but the listing's own."""
    script = (
        "import os\n"
        "me = {os.getpid(), os.getppid()}\n"
        "for p in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n"
        "        cmd = open(f'/proc/{p}/cmdline', 'rb').read().replace(b'\\0', b' ')\n"
        "    except OSError:\n"
        "        continue\n"
        "    if int(p) not in me:\n"
        "        print(cmd.decode(errors='replace').strip())\n"
    )
    res = sb.run(["python3", "-c", script], user="0:0")
    assert res.exit_code == 0, res.stderr
    return sorted(res.stdout.splitlines())


def test_the_app_runs_walled_in_and_leaves_nothing_behind(tmp_path):
    from agentgym.sandbox import open_sandbox

    task = load_task(_probe_task(tmp_path, PROBE_MAIN))
    with open_sandbox("docker", timeout=120, memory_mb=1024, pids=512) as fresh:
        baseline = _processes(fresh)
    with docker_sandbox(task) as sb:
        result = grade(task, task.reference_files(), sb, details=True)
        assert result.per_test == {
            "test_walls.py::test_a_daemon_is_left_behind": "passed",
            "test_walls.py::test_the_app_is_walled_in": "passed",
        }, (result.details, result.errors)
        sb.reset()
        left = _processes(sb)
    assert not [c for c in left if "walled_in" in c or "47123" in c or "chromium" in c], left
    assert len(left) == len(baseline), (left, baseline)


def test_an_app_that_never_answers_fails_within_its_limits(tmp_path):
    hang = "import time\ntime.sleep(3600)\n"
    task = load_task(_probe_task(tmp_path, hang, startup_timeout=3))
    with docker_sandbox(task) as sb:
        result = grade(task, task.reference_files(), sb, details=True)
    assert result.passed == 0 and not result.tampered and not result.timed_out
    assert set(result.per_test.values()) <= {"failed", "error"}, result.per_test
    assert all(re.search(r"did not answer", d) for d in result.details.values()), result.details


COVERED_PAGE_MAIN = """\
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAGE = b'''<!doctype html><html><body>
<button id="go" onclick="document.getElementById('out').textContent = 'clicked'">Go</button>
<p id="out"></p>
<div id="cover" onclick="document.getElementById('out').textContent = 'cover'"
     style="position: fixed; inset: 0; background: rgba(0, 0, 0, 0.1)"></div>
<script>setTimeout(() => document.getElementById('cover').remove(), 800)</script>
</body></html>'''


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)


ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""

COVERED_PAGE_TESTS = """\
def test_a_click_waits_until_nothing_covers_its_target(app, page):
    page.goto(app.url + "/")
    page.click("#go")  # a cover lies over the page for its first 0.8 s
    page.wait_text("#out", "clicked")
"""


def test_a_click_lands_on_its_target_not_on_what_covers_it(tmp_path):
    """The browser driver clicks an element once it is uncovered (a page still settling
    would otherwise take the click on whatever lies over or moved under that point)."""
    task = load_task(_probe_task(tmp_path, COVERED_PAGE_MAIN, tests=COVERED_PAGE_TESTS))
    with docker_sandbox(task) as sb:
        result = grade(task, task.reference_files(), sb, details=True)
    assert result.passed == result.total == 1, (result.details, result.errors)
