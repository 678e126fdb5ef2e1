"""Grading an AppGen project: hidden tests in a fresh sandbox, defended against tampering.

:func:`grade` copies the agent's project into a fresh sandbox, adds the hidden tests and a
small runner, runs pytest once and reads back per-test outcomes. The reward is the share
of hidden test cases that passed.

What the agent controls is the content of its project. What it must not be able to do is
turn a failing test into a pass. The defences, in order:

1. **Filtering** (:func:`filter_project`). Only the project's own source and data files are
   copied. Dropped: pytest and packaging configuration (``conftest.py``, ``pytest.ini``,
   ``pytest.toml``, ``tox.ini``, ``setup.cfg``, ``pyproject.toml``), interpreter start-up
   hooks (``sitecustomize.py``, ``usercustomize.py``, ``*.pth``), package metadata
   (``*.dist-info``, ``*.egg-info``, which could declare pytest plugins), caches and
   bytecode, and every test module (``test_*.py``, ``*_test.py``, the ``tests/``
   directory).
2. **Isolation of the run.** The hidden tests live in a directory with a random name
   outside the project; pytest runs with the grader's own ini file (``-c``), ``--rootdir``
   there, ``--noconftest``, ``-p no:cacheprovider``, ``--import-mode=importlib``, plugin
   autoloading off and ``PYTEST_ADDOPTS`` cleared. Python starts in isolated mode
   (``-I``: no user site, no ``PYTHON*`` variables), and the project is *appended* to
   ``sys.path``, so a project module cannot shadow the standard library or pytest.
3. **A report the agent cannot forge.** The runner records outcomes with an in-process
   plugin, writes them with a per-run secret (read from a file the runner deletes before any
   project code runs; never in argv or the environment)
   and ends with ``os._exit`` so ``atexit`` hooks of the agent's code never run. The exit
   code is ignored; a missing, unreadable or unsigned report means every test failed.
4. **Tamper checks.** Canary tests with random names run first and last: one must fail,
   one must pass. If a must-fail canary passes (say the agent's code patched pytest to
   pass everything) or a must-pass canary does not, the run is declared tampered and
   scores 0. The hidden test files are hashed before the run and again after collection
   (a project that rewrites them on import is caught). Each test case runs under a
   SIGALRM timeout, the whole run under the sandbox timeout.

Only test cases the task expects (found statically by :mod:`.taskset`) count; extra tests
are ignored, missing ones count as failed.

What this does not defend against: code that runs inside the pytest process can in
principle read the runner's memory and subvert it in ways the canaries do not see (for
example patching only the hidden tests' modules). The checks raise the bar well above
the file-based tricks (config files, conftest, overwritten tests, exit codes, fake
reports); the sandbox bounds what such code can reach.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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
    """

    passed: int
    total: int
    per_test: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    tampered: bool = False
    timed_out: bool = False
    dropped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def score(self) -> float:
        if self.tampered or self.total == 0:
            return 0.0
        return self.passed / self.total


# The runner executes inside the grading sandbox with the sandbox's python3 (3.8+ syntax).
RUNNER = r"""
import hashlib, json, os, signal, sys

def main():
    here = os.path.dirname(os.path.abspath(__file__))
    # the config (with the report secret) is read and deleted before any project code runs
    config_path = os.path.join(here, "config.json")
    with open(config_path) as f:
        cfg = json.load(f)
    os.remove(config_path)
    secret = cfg.pop("secret")
    os.makedirs(cfg["project"], exist_ok=True)
    os.chdir(cfg["project"])
    project = os.getcwd()
    report_path = os.path.join(here, "report.json")
    for var in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
        os.environ.pop(var, None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    sys.dont_write_bytecode = True

    def digests():
        out = {}
        for rel in cfg["hashes"]:
            try:
                with open(os.path.join(here, rel), "rb") as f:
                    out[rel] = hashlib.sha256(f.read()).hexdigest()
            except OSError:
                out[rel] = None
        return out

    def scrub(text):
        text = text.replace(here, "<grader>").replace(project, "<project>")
        return text

    state = {"tests": {}, "collect_errors": {}, "source_ok": digests() == cfg["hashes"],
             "source_ok_after_collection": None}
    sys.path.append(project)
    import pytest

    class Timeout(BaseException):
        pass

    def on_alarm(signum, frame):
        raise Timeout("test exceeded %ss" % cfg["test_timeout"])

    class Recorder:
        def _guard(self):
            signal.signal(signal.SIGALRM, on_alarm)
            signal.setitimer(signal.ITIMER_REAL, cfg["test_timeout"], 1.0)

        def _unguard(self):
            signal.setitimer(signal.ITIMER_REAL, 0)

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_setup(self, item):
            self._guard()
            try:
                yield
            finally:
                self._unguard()

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_call(self, item):
            self._guard()
            try:
                yield
            finally:
                self._unguard()

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_teardown(self, item):
            self._guard()
            try:
                yield
            finally:
                self._unguard()

        def pytest_collection_finish(self, session):
            state["source_ok_after_collection"] = digests() == cfg["hashes"]

        def pytest_collectreport(self, report):
            if report.failed:
                lines = [l for l in str(report.longrepr).splitlines() if l.startswith("E ")]
                msg = lines[-1][1:].strip() if lines else "collection failed"
                state["collect_errors"][report.nodeid] = scrub(msg)[:300]

        def pytest_runtest_logreport(self, report):
            tests = state["tests"]
            prev = tests.get(report.nodeid)
            if report.when == "call":
                outcome = report.outcome
                if hasattr(report, "wasxfail"):
                    outcome = "skipped"
            elif report.failed:
                outcome = "error"
            elif report.skipped:
                outcome = "skipped"
            else:
                outcome = prev or "passed"
            if prev in ("failed", "error", "skipped") and outcome == "passed":
                outcome = prev
            if prev == "failed" and outcome == "error":
                outcome = "failed"
            tests[report.nodeid] = outcome

    args = ["-c", os.path.join(here, "pytest.ini"), "--rootdir", here, "-p", "no:cacheprovider",
            "--noconftest", "--import-mode=importlib", "-q", "--color=no",
            "--basetemp", os.path.join(here, "tmp")]
    args += [os.path.join(here, f) for f in cfg["files"]]
    try:
        pytest.main(args, plugins=[Recorder()])
    except BaseException as e:
        state["crash"] = scrub("%s: %s" % (type(e).__name__, e))[:300]
    state["secret"] = secret
    data = json.dumps(state)
    fd = os.open(report_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, data.encode())
    os.close(fd)
    os._exit(0)

main()
"""

INI = "[pytest]\naddopts =\n"

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


def grade(task: AppTask, files: Mapping[str, bytes], sandbox: Sandbox) -> GradeResult:
    """Run ``task``'s hidden tests against ``files`` (the agent's project) in ``sandbox``.

    ``sandbox`` must be fresh (empty workspace); it is not closed here.
    """
    start = time.monotonic()
    project, dropped = filter_project(files)
    grader = f".grader-{secrets.token_hex(8)}"
    secret = secrets.token_hex(16)
    first = _canary(secrets.token_hex(16))
    last = _canary(secrets.token_hex(16))
    hidden = {f"hidden/{rel}": data for rel, data in task.hidden_tests.items()}
    hidden[f"hidden/{first[0]}"] = first[3].encode()
    hidden[f"hidden/{last[0]}"] = last[3].encode()
    test_files = sorted(f"hidden/{t}" for t in {e.file for e in task.expected_tests})
    run_order = [f"hidden/{first[0]}", *test_files, f"hidden/{last[0]}"]

    payload: dict[str, bytes | str] = {f"{PROJECT_DIR}/{p}": d for p, d in project.items()}
    payload.update({f"{grader}/{p}": d for p, d in hidden.items()})
    config = {
        "secret": secret,
        "project": PROJECT_DIR,
        "files": run_order,
        "test_timeout": float(task.limits.test_timeout),
        "hashes": {p: hashlib.sha256(hidden[p]).hexdigest() for p in run_order},
    }
    payload[f"{grader}/runner.py"] = RUNNER
    payload[f"{grader}/pytest.ini"] = INI
    payload[f"{grader}/config.json"] = json.dumps(config)
    sandbox.write_files(payload)
    result = sandbox.run(
        ["python3", "-I", f"{grader}/runner.py"], timeout=float(task.limits.grade_timeout)
    )
    report: dict[str, Any] | None = None
    problem = None
    try:
        report = json.loads(sandbox.read_bytes(f"{grader}/report.json"))
    except FileNotFoundError:
        problem = "no test report was written"
    except (ValueError, OSError) as e:
        problem = f"the test report could not be read ({type(e).__name__})"
    except Exception as e:  # a sandbox error reading the file
        problem = f"the test report could not be read ({type(e).__name__})"
    if report is not None and (not isinstance(report, dict) or report.get("secret") != secret):
        report, problem = None, "the test report was not written by the grader"

    out = GradeResult(passed=0, total=task.num_hidden_tests, dropped=dropped)
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
        out.seconds = time.monotonic() - start
        return out

    tests: dict[str, str] = {str(k): str(v) for k, v in report.get("tests", {}).items()}
    for nodeid, msg in sorted(report.get("collect_errors", {}).items()):
        out.errors.append(f"collecting {nodeid.removeprefix('hidden/')}: {_mask(msg)}")
    if report.get("crash"):
        out.errors.append(f"pytest crashed: {_mask(report['crash'])}")
    for canary in (first, last):
        fail_id = f"hidden/{canary[0]}::{canary[1]}"
        ok_id = f"hidden/{canary[0]}::{canary[2]}"
        if tests.get(fail_id) not in ("failed", None) or tests.get(ok_id) not in ("passed", None):
            out.tampered = True
        if tests.get(fail_id) is None or tests.get(ok_id) is None:
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
    out.seconds = time.monotonic() - start
    return out


_HEX = re.compile(r"0x[0-9a-fA-F]{6,}")


def _mask(text: str) -> str:
    """Remove what differs from run to run (object addresses)."""
    return _HEX.sub("0x…", str(text))[:300]


def _scrub_sandbox_text(lines: list[str]) -> str:
    text = " ".join(lines).strip()
    text = re.sub(r"\.grader-[0-9a-f]+", "<grader>", text)
    return _mask(text)
