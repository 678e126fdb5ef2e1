"""Grading an AppGen project: hidden tests that the code under test cannot subvert.

:func:`grade` runs a task's hidden tests against the agent's project in a fresh sandbox
and reads back per-test outcomes; the reward is the share of hidden test cases that pass.
A policy optimised against the grader will look for any way to be told "passed", so the
design rests on one rule: **no code the agent wrote runs in a process that records
outcomes, holds the report secret, or can reach the hidden tests**. Checks that live in
the same process as the agent's code (canaries, hashes, secrets in memory) can all be
reached by it, so they are not the defence.

The boundary (Docker backend):

* Two users in the sandbox. The grader's process runs as root in the container
  (:data:`GRADER_USER`), holding no capability but ``CAP_DAC_OVERRIDE`` (so the tests may
  read and change whatever the project wrote, whatever its modes); the agent's code runs
  as the sandbox user, which holds none. The hidden tests, fixtures, grader modules and
  the secret live in a directory of mode 0700 created by the grader's process (they arrive
  on its standard input, never in a file the agent's user can read, in argv or in the
  environment). The agent's processes cannot read those files, signal the grader, trace
  it or read its memory.
* The agent's code runs in worker processes forked, one per test, by a spawner that runs
  as the sandbox user (started detached by the host before grading). Hidden tests reach
  the project through proxies (``apptest``, in the grader's process): importing a project
  module gives a proxy; calls, attribute reads, items, iteration, ``len``, ``str``,
  ``in`` and ``with`` run in the test's worker, and only plain data crosses back
  (numbers, strings, bytes, lists, tuples, dicts, sets, None, booleans, dates, paths),
  rebuilt by the grader's own code, so a returned value cannot lie about its equality or
  type. Any other object stays in the worker and is seen as a proxy equal only to
  itself. Exceptions cross as class name, message and arguments (a built-in class as
  itself, a project class as a mirror class built by name). Tests that run the project's
  CLI do so through ``apptest.subprocess``: the command starts in the worker, as the
  sandbox user. HTTP tests talk to a server that the worker started.
* Outcomes are recorded by a pytest plugin in the grader's process and written, with a
  per-run secret, to that process's own standard output (pytest's output goes to
  /dev/null, so nothing that came from the project reaches the report's stream). The
  exit code is ignored; a missing, unreadable or unsigned report means every test failed.
* Limits: every test has a timeout (SIGALRM in the grader, and a deadline on every answer
  from the worker); the whole run has the task's ``grade_timeout``, and the grader stops
  starting tests shortly before it, so the outcomes so far are still reported. Workers
  have a CPU-time limit and an OOM score that makes the kernel kill them before the
  grader. A worker that crashes, exits, hangs or is killed fails only the test it served;
  the next test gets a fresh one, after every process the previous one left is killed.
  After grading, the sandbox's reset kills every process and removes every file of both
  users.

Also, as before: only the project's own source and data files are copied
(:func:`filter_project` drops pytest and packaging configuration, interpreter start-up
hooks, package metadata, caches, test modules and the ``tests/`` directory); pytest runs
with the grader's own ini, ``--noconftest``, no cache, importlib mode, plugin autoloading
off; canary tests with random names (one must fail, one must pass) and hashes of the
hidden test files guard the runner itself (``tampered``: score 0). Only test cases the
task expects (found statically by :mod:`.taskset`) count.

During the episode, the hidden tests are never in the agent's sandbox; the Docker image
does not contain agentgym, and the local backend's bubblewrap level hides agentgym's own
files, so ``<run>`` commands cannot read, list or name them.

What this does not defend against:

* The local backend has one user: the grader and the workers are separate processes (so
  every in-process trick fails), but a worker runs as the grader's uid and could, in
  principle, read the hidden test files or interfere with the grader's process from
  outside. Grade with the Docker backend when the policy is being optimised.
* The worker sees the inputs the tests pass in and the order of the calls, and could
  notice whether a test goes on after one of its answers; it never sees an expected value
  (assertion messages of the tests' own functions are not sent back to it).
* Test names: pytest's ``tmp_path`` directories are anonymous, but a test's own strings
  are whatever the task author wrote.
* Kernel exploits and Docker escapes (see :mod:`agentgym.sandbox.docker.sandbox`).
* A project that exhausts memory, processes or disk can make its own tests fail, or the
  grader's run fail (then every test counts as failed): never pass.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentgym import ConfigError
from agentgym.envs.appgen.grader import GRADER_MODULES, WORKER_MODULES, source
from agentgym.envs.appgen.taskset import VISIBLE_TESTS_DIR, AppTask, is_test_file
from agentgym.sandbox import Sandbox

#: File names that are never copied into the grading sandbox.
DROPPED_NAMES = frozenset(
    {
        "conftest.py",
        "pytest.ini",
        "pytest.toml",
        ".pytest.toml",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
        "sitecustomize.py",
        "usercustomize.py",
    }
)
DROPPED_PARTS = frozenset({"__pycache__", ".pytest_cache", ".git"})
DROPPED_SUFFIXES = (".pth", ".pyc", ".pyo")
MAX_PROJECT_FILES = 300
MAX_FILE_BYTES = 1_000_000
PROJECT_DIR = "project"
#: where the spawner's modules go in the workspace (readable by the project's user)
WORKER_DIR = ".agentgym-worker"
#: the uid:gid of the grader's process when the sandbox has users: in Docker, a root that
#: holds only CAP_DAC_OVERRIDE (it reads and changes what the project wrote, whatever the
#: modes); the project's user cannot signal, trace or read it
GRADER_USER = "0:0"
#: seconds before ``grade_timeout`` by which the grader's tests must have ended (a test
#: running then is cut short, later ones are not started), so that the report is written
RESERVE_SECONDS = 4.0

OUTCOMES = ("passed", "failed", "error", "skipped", "not run")


def drop_reason(path: str) -> str | None:
    """Why ``path`` is not copied into the grading sandbox, or None when it is."""
    parts = path.split("/")
    name = parts[-1]
    if set(parts) & DROPPED_PARTS:
        return "cache or VCS directory"
    if any(p.endswith((".dist-info", ".egg-info")) for p in parts):
        return "package metadata (could declare pytest plugins)"
    if name in DROPPED_NAMES:
        return "test or interpreter configuration"
    if name.endswith(DROPPED_SUFFIXES):
        return "start-up hook or bytecode"
    if parts[0] == VISIBLE_TESTS_DIR and len(parts) > 1:
        return "test directory"
    if is_test_file(path):
        return "test module"
    return None


def filter_project(files: Mapping[str, bytes]) -> tuple[dict[str, bytes], dict[str, str]]:
    """Split the agent's files into (kept, dropped path -> reason)."""
    kept: dict[str, bytes] = {}
    dropped: dict[str, str] = {}
    for path in sorted(files):
        why = drop_reason(path)
        if why is None and len(files[path]) > MAX_FILE_BYTES:
            why = f"larger than {MAX_FILE_BYTES} bytes"
        if why is None and len(kept) >= MAX_PROJECT_FILES:
            why = f"more than {MAX_PROJECT_FILES} files"
        if why:
            dropped[path] = why
        else:
            kept[path] = files[path]
    return kept, dropped


@dataclass
class GradeResult:
    """The outcome of grading one project.

    Attributes:
        passed: hidden test cases that passed.
        total: hidden test cases the task defines.
        per_test: test id (``file::name``, parametrized cases with their ``[id]``) ->
            one of :data:`OUTCOMES`.
        errors: deterministic, short descriptions of what went wrong (collection errors,
            timeouts, tampering), with sandbox paths replaced by ``<project>`` and so on.
        tampered: a tamper check failed; the score is 0.
        timed_out: the whole run hit the grading timeout.
        dropped: project files that were not copied, with the reason.
        seconds: wall time of the grading run (non-deterministic: goes to metrics).
        backend: the sandbox backend that graded (``"docker"``, ``"local"``).
        isolated: the grader and the project ran as separate users (False on the local
            backend, which needs ``unsafe_local_grading=True``).
    """

    passed: int
    total: int
    per_test: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    tampered: bool = False
    timed_out: bool = False
    dropped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    backend: str = ""
    isolated: bool = True
    requirements: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: test id -> the first lines of its failure (only with ``grade(..., details=True)``:
    #: for task authors; never in the reward breakdown, as they may hold expected values)
    details: dict[str, str] = field(default_factory=dict)

    @property
    def lost_requirements(self) -> list[str]:
        """``"name (stage N): text"`` of every requirement with a failing test."""
        return [
            f"{name} (stage {r['stage']}): {r['text']}"
            for name, r in self.requirements.items()
            if not r["met"]
        ]

    @property
    def score(self) -> float:
        if self.tampered or self.total == 0:
            return 0.0
        return self.passed / self.total


INI = (
    "[pytest]\naddopts =\nmarkers =\n"
    "    requirement(name): the user's requirement this test checks (task.toml [requirements])\n"
)

_CANARY = """\
def {fail}():
    assert False, "canary: this test must fail"


def {ok}():
    assert 1 + 1 == 2
"""


def _canary(token: str) -> tuple[str, str, str, str]:
    """(file name, must-fail test, must-pass test, source) with random names."""
    name = f"test_{token[:10]}.py"
    fail, ok = f"test_{token[10:18]}", f"test_{token[18:26]}"
    return name, fail, ok, _CANARY.format(fail=fail, ok=ok)


# Runs as ``python3 -I -c BOOT`` with the bundle on stdin: writes the grader's files into a
# fresh private directory (mode 0700) and hands over to apptest_runner.
BOOT = """
import base64, json, os, sys, tempfile
cfg = json.loads(sys.stdin.buffer.read().decode("utf-8"))
here = tempfile.mkdtemp(prefix=".agentgym-grader-")
for rel, data in cfg.pop("contents").items():
    path = os.path.join(here, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(base64.b64decode(data))
sys.path.insert(0, here)
import apptest_runner
apptest_runner.main(here, cfg)
"""


def top_level_names(paths: list[str]) -> list[str]:
    """The importable top-level names of a project: its top directories and modules."""
    names = set()
    for path in paths:
        head, _, rest = path.partition("/")
        name = head if rest else (head[:-3] if head.endswith(".py") else "")
        if name.isidentifier():
            names.add(name)
    return sorted(names)


def grade(
    task: AppTask,
    files: Mapping[str, bytes],
    sandbox: Sandbox,
    *,
    details: bool = False,
    unsafe_local_grading: bool = False,
) -> GradeResult:
    """Run ``task``'s hidden tests against ``files`` (the agent's project) in ``sandbox``.

    ``sandbox`` must be fresh (empty workspace); it is not closed here. With a sandbox
    that ``supports_users`` (Docker) the grader runs as :data:`GRADER_USER` and the
    project as the sandbox user. A sandbox without users (the local backend) grades
    without isolation, a project could rewrite the grader, so it needs
    ``unsafe_local_grading=True`` (see the module docstring); the result says which
    (``backend``, ``isolated``).

    Raises:
        agentgym.ConfigError: a sandbox without users and no ``unsafe_local_grading``.
        agentgym.InfraError: the sandbox died or its engine went away during grading: the
            project cannot be scored (never the project's doing).
    """
    two_users = sandbox.supports_users and sandbox.limits.user != GRADER_USER
    if not two_users and not unsafe_local_grading:
        raise ConfigError(
            f"grading in a {sandbox.backend} sandbox would run the grader and the project "
            "as one user (a project could rewrite the grader): use a Docker sandbox "
            "(`bash scripts/ensure_docker.sh`, `agentgym sandbox doctor`), or pass "
            "unsafe_local_grading=True for trusted code"
        )
    start = time.monotonic()
    project, dropped = filter_project(files)
    secret = secrets.token_hex(16)
    first = _canary(secrets.token_hex(16))
    last = _canary(secrets.token_hex(16))
    hidden = {f"hidden/{rel}": data for rel, data in task.hidden_tests.items()}
    hidden[f"hidden/{first[0]}"] = first[3].encode()
    hidden[f"hidden/{last[0]}"] = last[3].encode()
    test_files = sorted(f"hidden/{t}" for t in {e.file for e in task.expected_tests})
    run_order = [f"hidden/{first[0]}", *test_files, f"hidden/{last[0]}"]

    payload: dict[str, bytes] = {f"{PROJECT_DIR}/{p}": d for p, d in project.items()}
    payload.update({f"{WORKER_DIR}/{m}": source(m) for m in WORKER_MODULES})
    sandbox.write_files(payload)

    limits = task.limits
    socket_name = f"agentgym-grading-{secrets.token_hex(8)}"
    lifetime = float(limits.grade_timeout) + 15.0
    worker = [
        "python3",
        "-I",
        f"{WORKER_DIR}/apptest_worker.py",
        socket_name,
        PROJECT_DIR,
        "sweep" if two_users else "group",
        str(int(limits.test_timeout) + 5),
        str(int(lifetime)),
    ]
    if two_users:
        sandbox.start(worker, timeout=lifetime)
    grader_files: dict[str, bytes] = {m: source(m) for m in GRADER_MODULES}
    grader_files["pytest.ini"] = INI.encode()
    grader_files.update(hidden)
    bundle = {
        "contents": {p: base64.b64encode(d).decode("ascii") for p, d in grader_files.items()},
        "secret": secret,
        "project": PROJECT_DIR,
        "worker": None if two_users else worker,
        "socket": socket_name,
        "names": top_level_names(list(project)),
        "files": run_order,
        "test_timeout": float(limits.test_timeout),
        "grade_timeout": float(limits.grade_timeout),
        "reserve": RESERVE_SECONDS,
        "hashes": {p: hashlib.sha256(hidden[p]).hexdigest() for p in run_order},
        "app": _app_settings(task),
        "services": {s.name: {"fixture": f"hidden/{s.fixture}"} for s in task.services},
    }
    result = sandbox.run(
        ["python3", "-I", "-c", BOOT],
        stdin=json.dumps(bundle),
        timeout=float(limits.grade_timeout),
        user=GRADER_USER if two_users else None,
    )
    report, problem = _read_report(result.stdout, result.stdout_truncated, secret)
    out = GradeResult(
        passed=0,
        total=task.num_hidden_tests,
        dropped=dropped,
        backend=sandbox.backend,
        isolated=two_users,
    )
    if result.timed_out:
        out.timed_out = True
        out.errors.append(f"the hidden tests did not finish within {limits.grade_timeout}s")
    if report is None:
        out.errors.append(f"grading failed: {problem}; every hidden test counts as failed")
        if not result.timed_out and result.exit_code != 0:
            tail = _scrub_sandbox_text(result.stderr.strip().splitlines()[-1:] or [""])
            if tail:
                out.errors.append(f"runner: {tail}")
        out.per_test = {t.test_id: "not run" for t in task.expected_tests}
        out.requirements = requirement_report(task, out.per_test)
        out.seconds = time.monotonic() - start
        return out
    _apply_report(out, report, task, (first, last))
    if details and isinstance(report.get("details"), dict):
        files = {f"hidden/{t.file}::" for t in task.expected_tests}
        out.details = {
            str(k).removeprefix("hidden/"): _mask(v)
            for k, v in report["details"].items()
            if any(str(k).startswith(f) for f in files)
        }
    out.seconds = time.monotonic() - start
    return out


def _app_settings(task: AppTask) -> dict[str, Any] | None:
    """What the grader's ``app`` fixture needs of the task's ``[app]`` and ``[services]``."""
    if task.app is None:
        return None
    return {
        "command": task.app.command,
        "ready_path": task.app.ready_path,
        "startup_timeout": task.app.startup_timeout,
        "service_env": {s.name: s.env for s in task.services},
    }


def _read_report(
    stdout: str, truncated: bool, secret: str
) -> tuple[dict[str, Any] | None, str | None]:
    """The grader's report (from its standard output) and, when there is none, why."""
    if not stdout.strip():
        return None, "no test report was written"
    if truncated:
        return None, "the test report was larger than the sandbox's output limit"
    try:
        report = json.loads(stdout)
    except ValueError as e:
        return None, f"the test report could not be read ({type(e).__name__})"
    if not isinstance(report, dict) or report.get("secret") != secret:
        return None, "the test report was not written by the grader"
    return report, None


def _apply_report(
    out: GradeResult, report: dict[str, Any], task: AppTask, canaries: tuple[tuple, ...]
) -> None:
    """Fill ``out`` from a signed report: outcomes, errors, tamper checks."""
    raw = report.get("tests")
    tests: dict[str, str] = (
        {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
    )
    collect_errors = report.get("collect_errors")
    for nodeid, msg in sorted((collect_errors if isinstance(collect_errors, dict) else {}).items()):
        out.errors.append(f"collecting {str(nodeid).removeprefix('hidden/')}: {_mask(msg)}")
    if report.get("crash"):
        out.errors.append(f"pytest crashed: {_mask(report['crash'])}")
    if report.get("out_of_time"):
        out.errors.append(
            f"the grading time ({task.limits.grade_timeout}s) ran out; the tests not started "
            "by then count as failed"
        )
    # a canary the grading time left unstarted is "skipped": only one that ran counts
    not_run = (None, "skipped") if report.get("out_of_time") else (None,)
    for canary in canaries:
        fail_id = f"hidden/{canary[0]}::{canary[1]}"
        ok_id = f"hidden/{canary[0]}::{canary[2]}"
        if tests.get(fail_id) not in ("failed", *not_run) or tests.get(ok_id) not in (
            "passed",
            *not_run,
        ):
            out.tampered = True
        if not report.get("out_of_time") and (
            tests.get(fail_id) is None or tests.get(ok_id) is None
        ):
            out.tampered = True  # a canary that did not run: the run was cut short or rigged
    if not report.get("source_ok") or report.get("source_ok_after_collection") is False:
        out.tampered = True
        out.errors.append("the hidden test files were modified during the run")
    if out.tampered:
        out.errors.append(
            "tampering detected: the grader's canary tests did not behave as they must, "
            "so no hidden test is counted"
        )
    for exp in task.expected_tests:
        base = f"hidden/{exp.file}::{exp.name}"
        if exp.count == 1:
            out.per_test[exp.test_id] = tests.get(base, "not run")
            continue
        cases = sorted(k for k in tests if k.startswith(base + "["))[: exp.count]
        for k in cases:
            out.per_test[k.removeprefix("hidden/")] = tests[k]
        for i in range(exp.count - len(cases)):
            out.per_test[f"{exp.test_id}[#{len(cases) + i}]"] = "not run"
    out.passed = 0 if out.tampered else sum(v == "passed" for v in out.per_test.values())
    out.requirements = requirement_report(task, out.per_test, out.tampered)


def requirement_report(
    task: AppTask, per_test: Mapping[str, str], tampered: bool = False
) -> dict[str, dict[str, Any]]:
    """Per requirement of ``task``: its stage and text, and how many of its tests passed
    (``met`` when all did)."""
    out: dict[str, dict[str, Any]] = {}
    for req in task.requirements:
        cases = [
            outcome
            for exp in task.expected_tests
            if req.name in exp.requirements
            for key, outcome in per_test.items()
            if key == exp.test_id or key.startswith(exp.test_id + "[")
        ]
        passed = 0 if tampered else sum(o == "passed" for o in cases)
        out[req.name] = {
            "stage": req.stage,
            "text": req.text,
            "passed": passed,
            "total": len(cases),
            "met": bool(cases) and passed == len(cases),
        }
    return out


_HEX = re.compile(r"0x[0-9a-fA-F]{6,}")


def _mask(text: str) -> str:
    """Remove what differs from run to run (object addresses)."""
    return _HEX.sub("0x…", str(text))[:300]


def _scrub_sandbox_text(lines: list[str]) -> str:
    text = " ".join(lines).strip()
    text = re.sub(r"\.grader-[0-9a-f]+", "<grader>", text)
    return _mask(text)
