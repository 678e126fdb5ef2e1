"""Grading an AppGen project: hidden tests that the code under test cannot subvert.

:func:`grade` runs a task's hidden tests against the agent's project in a sandbox of its
own (AppGen's pool of gradings, which no agent ever holds: see
:mod:`agentgym.envs.appgen.sandboxes`) and reads back per-test outcomes; the reward is the share of hidden test cases that pass.
A policy optimised against the grader will look for any way to be told "passed", so the
design rests on one rule: **no code the agent wrote runs in a process that records
outcomes, holds the report secret, or can reach the hidden tests, and nothing it does can
change the grader's code**. Checks that live in the same process as the agent's code
(canaries, hashes, secrets in memory) can all be reached by it, so they are not the defence.

The boundary (Docker backend), in the order a grading runs:

1. The project's files and the spawner's modules are written as the sandbox user (uid
   1000, no capability).
2. :data:`SEAL_USER` (root with the grader's group) writes the grader's modules, its ini
   and the hidden tests (from its standard input) into a fresh directory of root's:
   mode 0750, files 0640, group the grader's (:data:`SEAL`), inside ``/tmp``'s
   :data:`SEALED_PARENT` (0710), which the project cannot enter, so it cannot learn the
   directory's name; then it exits. Nothing of the project has run yet, and nothing of the
   grading run is root afterwards.
3. The spawner starts, as the sandbox user: it imports its standard modules, compiles the
   project, then puts the project on its ``sys.path`` and forks one worker per test.
4. The grader (:data:`GRADER_USER`, an unprivileged uid of its own: no capability, no
   ``CAP_DAC_OVERRIDE``) makes itself non-dumpable (no process of its uid, such as its
   browser, may then trace it or read its memory, yama or not), gets the configuration
   and the report secret on its standard input, checks that nothing on its ``sys.path``
   can be written (the standard library's directories are read-only, its own directory
   is root's and comes after them), imports
   everything it will need, then runs pytest. It reads its files through its group and
   can write none of them; the project's processes (another uid) cannot read them,
   signal the grader, trace it or read its memory.
5. Hidden tests reach the project through proxies (``apptest``, in the grader's
   process): importing a project module gives a proxy; calls, attribute reads, items,
   iteration, ``len``, ``str``, ``in`` and ``with`` run in the test's worker, and only
   plain data crosses back (numbers, strings, bytes, lists, tuples, dicts, sets, None,
   booleans, dates, paths), rebuilt by the grader's own code, so a returned value cannot
   lie about its equality or type. Exceptions cross as class name, message and arguments.
   CLI tests start commands with ``apptest.subprocess`` (in the worker); files the
   project can reach are read and written with ``apptest.files``, which refuses symlinks,
   FIFOs and hard links (``O_NOFOLLOW`` at every step, ``fstat`` checks). Directories both
   sides write are made sticky, with their final mode, under random names.
6. Outcomes are recorded by a pytest plugin in the grader's process and written, with the
   secret, to that process's own standard output (pytest's output goes to /dev/null). The
   exit code is ignored; a missing, unreadable or unsigned report means every test failed.
   Hashes of every grader file and hidden test are checked at the start, after collection
   and once more before the report is written; canary tests with random names (one must
   fail, one must pass) guard the runner (``tampered``: score 0).

Limits: every test has a timeout (SIGALRM in the grader, and a deadline on every answer
from the worker); the whole run has the task's ``grade_timeout``, and the grader stops
starting tests shortly before it, so the outcomes so far are still reported. Workers have
a CPU-time limit and an OOM score that makes the kernel kill them before the grader,
pinned by a Landlock ruleset the spawner puts itself under (nothing under ``/proc``
writable), so project code cannot set it back. A
worker that crashes, exits, hangs or is killed fails only the test it served; the next
test gets a fresh one, after every process the previous one left is killed. After
grading, the sandbox's reset kills every process and removes every file and IPC object of
every user, and replaces a container it cannot show back to idle. The hidden tests'
helper modules are always the grader's copies (their names are never the project's).
Only the project's own source and data files are copied (:func:`filter_project`); pytest
runs with the grader's own ini, ``--noconftest``, no cache, importlib mode, plugin
autoloading off. Only test cases the task expects (found statically) count.

During the episode, the hidden tests are never in the agent's sandbox; the Docker image
does not contain agentgym, and the local backend's bubblewrap level hides agentgym's own
files, so ``<run>`` commands cannot read, list or name them.

What this does not defend against:

* The local backend has one user: a worker could write the grader's files and read the
  hidden tests, so :func:`grade` refuses it unless ``unsafe_local_grading=True``.
* The worker sees the inputs the tests pass in and the order of the calls; it never sees
  an expected value (assertion messages of the tests' own functions are not sent to it).
* A hidden test that opens a project path with plain ``open`` (``check-task`` flags it)
  follows the project's symlinks with the grader's rights: it can write nothing of the
  grader's, but could read a hidden test into data it then hands to the project.
* Kernel exploits and Docker escapes (see :mod:`agentgym.sandbox.docker.sandbox`).
* A project that exhausts memory, processes or disk can make its own tests fail, or the
  grader's run fail (then every test counts as failed): never pass.
* What a grading container's reset cannot clear (its counters of processes started and
  memory used, the next pid: a few bits) a graded project could leave for the next
  graded project in that container, never for an agent. Load, memory pressure and timing
  of the shared host reach every container running at the same time.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentgym import ConfigError, InfraError
from agentgym.envs.appgen.grader import GRADER_MODULES, WORKER_MODULES, source
from agentgym.envs.appgen.taskset import VISIBLE_TESTS_DIR, AppTask, is_test_file
from agentgym.sandbox import Sandbox

log = logging.getLogger("agentgym.envs.appgen")

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
#: the uid:gid of the grader's process when the sandbox has users: an unprivileged user
#: of its own, neither root nor the sandbox user, holding no capability (in Docker a
#: non-root exec gets none): it can write neither its own code nor the hidden tests, and
#: the project's user cannot signal, trace or read it
GRADER_USER = "1001:1001"
#: who installs ("seals") the grader's files before anything else of the grading runs:
#: root with the grader's group, so the files are root's, mode 0640 in a 0750 directory,
#: read by the grader through its group; this exec ends before the project's first process
SEAL_USER = "0:1001"
#: the users a sandbox's own user must not be for grading to be isolated
_GRADING_USERS = (GRADER_USER, SEAL_USER, "0:0")
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
    #: modules the grader imported after the project's code could run, other than the
    #: project's proxies and the hidden tests' own helpers (a test of the boundary expects
    #: none: every import is made before, from directories no one can write)
    late_imports: list[str] = field(default_factory=list)

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


#: the directory of root's in ``/tmp`` (0710, the grader's group) that holds the sealed
#: directories: the grader may pass through it, no one else may enter it, and no one
#: (the grader included) may list it, so the project cannot learn a sealed directory's name
SEALED_PARENT = ".agentgym-sealed"

# Runs as ``python3 -I -S -c SEAL`` (SEAL_USER) with the grader's files on stdin: writes them
# into a fresh directory of root's (0750, files 0640, the grader's group) inside
# SEALED_PARENT and prints its path. Nothing of the project has run yet, and nothing of the
# grading run is root after it.
SEAL = """
import base64, json, os, secrets, stat, sys, tempfile
contents = json.loads(sys.stdin.buffer.read().decode("utf-8"))
os.umask(0o027)
top = os.path.join(tempfile.gettempdir(), "SEALED_PARENT")
try:
    os.mkdir(top, 0o710)
except FileExistsError:
    pass
st = os.lstat(top)
if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or stat.S_IMODE(st.st_mode) != 0o710:
    sys.exit(top + " is not root's with mode 0710")
for _ in range(100):
    here = os.path.join(top, ".agentgym-grader-" + secrets.token_hex(8))
    try:
        os.mkdir(here, 0o750)
        break
    except FileExistsError:
        continue
for rel in sorted(contents):
    d = here
    for part in rel.split("/")[:-1]:
        d = os.path.join(d, part)
        if not os.path.isdir(d):
            os.mkdir(d, 0o750)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(os.path.join(here, rel), flags, 0o640), "wb") as f:
        f.write(base64.b64decode(contents[rel]))
sys.stdout.write(here)
""".replace("SEALED_PARENT", SEALED_PARENT)

# Runs as ``python3 -I -c BOOT`` with the configuration on stdin. First the process makes
# itself non-dumpable: no process of its uid (the grader's browser) may trace it or read its
# memory, which without CAP_SYS_PTRACE needs a dumpable target, whether or not the kernel
# has yama. With users, the sealed directory is ``here``; on one user (the local backend)
# BOOT writes the files itself into a private directory. The directory goes after the
# standard library on sys.path (nothing in it can shadow a standard module);
# apptest_runner checks the seal and takes over.
BOOT = """
import ctypes
ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
import base64, json, os, sys, tempfile
cfg = json.loads(sys.stdin.buffer.read().decode("utf-8"))
here = cfg.get("here")
if here is None:
    here = tempfile.mkdtemp(prefix=".agentgym-grader-")
    for rel, data in cfg.pop("contents").items():
        path = os.path.join(here, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
sys.path.append(here)
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
    two_users = sandbox.supports_users and sandbox.limits.user not in _GRADING_USERS
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
    canaries = (_canary(secrets.token_hex(16)), _canary(secrets.token_hex(16)))
    grader_files, run_order = _grader_files(task, canaries)
    payload: dict[str, bytes] = {f"{PROJECT_DIR}/{p}": d for p, d in project.items()}
    payload.update({f"{WORKER_DIR}/{m}": source(m) for m in WORKER_MODULES})
    sandbox.write_files(payload)
    here = _seal(sandbox, grader_files) if two_users else None
    worker = _spawner_argv(task, two_users)
    if two_users:
        sandbox.start(worker, timeout=float(task.limits.grade_timeout) + 15.0)
    bundle = {
        "here": here,
        "sealed": two_users,
        "secret": secret,
        "project": PROJECT_DIR,
        "worker": None if two_users else worker,
        "socket": worker[3],
        "names": top_level_names(list(project)),
        "files": run_order,
        "test_timeout": float(task.limits.test_timeout),
        "grade_timeout": float(task.limits.grade_timeout),
        "reserve": RESERVE_SECONDS,
        "hashes": {p: hashlib.sha256(d).hexdigest() for p, d in grader_files.items()},
        "app": _app_settings(task),
        "services": {s.name: {"fixture": f"hidden/{s.fixture}"} for s in task.services},
    }
    if here is None:
        bundle["contents"] = _encoded(grader_files)
    result = sandbox.run(
        ["python3", "-I", "-c", BOOT],
        stdin=json.dumps(bundle),
        timeout=float(task.limits.grade_timeout),
        user=GRADER_USER if two_users else None,
        env={"HOME": "/"} if two_users else None,  # not the project's workspace
    )
    out = GradeResult(
        passed=0,
        total=task.num_hidden_tests,
        dropped=dropped,
        backend=sandbox.backend,
        isolated=two_users,
    )
    _fill(out, result, secret, task, canaries, details)
    out.seconds = time.monotonic() - start
    return out


def _grader_files(task: AppTask, canaries: tuple) -> tuple[dict[str, bytes], list[str]]:
    """The grader's files (its modules, the ini, the hidden tests with the two canary
    files) and the order the test files run in (a canary first and last)."""
    files: dict[str, bytes] = {m: source(m) for m in GRADER_MODULES}
    files["pytest.ini"] = INI.encode()
    files.update({f"hidden/{rel}": data for rel, data in task.hidden_tests.items()})
    for name, _fail, _ok, text in canaries:
        files[f"hidden/{name}"] = text.encode()
    test_files = sorted(f"hidden/{t}" for t in {e.file for e in task.expected_tests})
    first, last = canaries
    return files, [f"hidden/{first[0]}", *test_files, f"hidden/{last[0]}"]


def _encoded(files: Mapping[str, bytes]) -> dict[str, str]:
    return {p: base64.b64encode(d).decode("ascii") for p, d in files.items()}


def _seal(sandbox: Sandbox, files: Mapping[str, bytes]) -> str:
    """Install the grader's files as :data:`SEAL_USER` (see :data:`SEAL`); their directory."""
    res = sandbox.run(
        ["python3", "-I", "-S", "-c", SEAL],
        stdin=json.dumps(_encoded(files)),
        timeout=120.0,
        user=SEAL_USER,
    )
    here = res.stdout.strip()
    if res.exit_code != 0 or not here.startswith("/"):
        raise InfraError(
            "the grader's files could not be installed in the grading sandbox (exit "
            f"{res.exit_code}: {res.stderr.strip()[-300:]!r})",
            reason="grader_setup",
        )
    return here


def _spawner_argv(task: AppTask, two_users: bool) -> list[str]:
    """The spawner's command (run as the project's user; see ``apptest_worker``)."""
    lifetime = float(task.limits.grade_timeout) + 15.0
    return [
        "python3",
        "-I",
        f"{WORKER_DIR}/apptest_worker.py",
        f"agentgym-grading-{secrets.token_hex(8)}",
        PROJECT_DIR,
        "sweep" if two_users else "group",
        str(int(task.limits.test_timeout) + 5),
        str(int(lifetime)),
    ]


def _fill(
    out: GradeResult, result: Any, secret: str, task: AppTask, canaries: tuple, details: bool
) -> None:
    """Fill ``out`` from the grader's run: its signed report, or why there is none."""
    report, problem = _read_report(result.stdout, result.stdout_truncated, secret)
    if result.timed_out:
        out.timed_out = True
        out.errors.append(f"the hidden tests did not finish within {task.limits.grade_timeout}s")
    if report is None:
        out.errors.append(f"grading failed: {problem}; every hidden test counts as failed")
        if not result.timed_out and result.exit_code != 0:
            tail = _scrub_sandbox_text(result.stderr.strip().splitlines()[-1:] or [""])
            if tail:
                out.errors.append(f"runner: {tail}")
        out.per_test = {t.test_id: "not run" for t in task.expected_tests}
        out.requirements = requirement_report(task, out.per_test)
        return
    if report.get("unsealed"):  # found before any code of the project ran
        raise InfraError(
            f"the grader's files were not sealed in the sandbox: {report['unsealed']}",
            reason="grader_setup",
        )
    _apply_report(out, report, task, canaries)
    if report.get("oom_pinned") is False and out.isolated:
        _warn_once(
            "AppGen's grading workers could not pin their OOM score (no Landlock in this "
            "kernel, or the container's seccomp profile refuses it): a project can lower "
            "its workers' score, so under memory pressure the kernel may kill the grader "
            "first (the project then fails its own grading). Linux 5.13 or later has Landlock."
        )
    if isinstance(report.get("late_imports"), list):
        out.late_imports = [str(n) for n in report["late_imports"]]
    if details and isinstance(report.get("details"), dict):
        files = {f"hidden/{t.file}::" for t in task.expected_tests}
        out.details = {
            str(k).removeprefix("hidden/"): _mask(v)
            for k, v in report["details"].items()
            if any(str(k).startswith(f) for f in files)
        }


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning(message)


def _app_settings(task: AppTask) -> dict[str, Any] | None:
    """What the grader's ``app`` fixture needs of the task's ``[app]`` and ``[services]``."""
    if task.app is None:
        return None
    return {
        "command": task.app.command,
        "ready_path": task.app.ready_path,
        "startup_timeout": task.app.startup_timeout,
        "page_timeout": task.app.page_timeout,
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
    if (
        not report.get("source_ok")
        or report.get("source_ok_after_collection") is False
        or report.get("source_ok_at_end") is not True
    ):
        out.tampered = True
        out.errors.append("the grader's files or the hidden tests were modified during the run")
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
