"""The grader's process inside the grading sandbox: runs the hidden tests, reports outcomes.

Started by the host as ``python3 -I -c BOOT`` with the configuration and the report
secret on standard input. In a sandbox with users (Docker) the host first sealed these
modules and the hidden tests into a directory of root's (mode 0750, files 0640, group the
grader's), and this process runs as the grader's own unprivileged uid: it reads them
through its group and can write none of them, and nothing else of the grading run is
root, so nobody can; the project's processes (another uid) can neither read that
directory nor signal or trace this process. :func:`main` checks that seal
(:mod:`apptest_seal`) and imports everything it will need before any project code runs.
On the local backend (one user, an unsafe opt-in) BOOT writes the files itself into a
private directory (mode 0700) and none of this holds.

No code of the project runs here: the hidden tests reach it through :mod:`apptest`
proxies, and each test gets a fresh worker process (started by the spawner,
:mod:`apptest_worker`). Outcomes are recorded by a pytest plugin in this process and
written, with the secret, to the standard output this process was started with; pytest's
own output goes to /dev/null, so nothing the project sends can reach the report's stream.
Standard library and pytest only, Python 3.8+.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import apptest
import apptest_files
import apptest_fullstack
import apptest_seal
import pytest


class Timeout(BaseException):
    """A test ran past its time limit (a BaseException, so that tests cannot catch it)."""


def _digests(here: str, hashes: dict) -> dict:
    out = {}
    for rel in hashes:
        try:
            with open(os.path.join(here, rel), "rb") as f:
                out[rel] = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            out[rel] = None
    return out


#: set while the grader starts its own browser, the one process allowed in this process
_LAUNCHING = [False]
_PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork"}
)


def _no_processes(event: str, args) -> None:
    """No process starts in the grader's process once the tests run: one started here would
    run as the grader. Hidden tests run the project's commands with ``apptest.subprocess``."""
    if event in _PROCESS_EVENTS and not _LAUNCHING[0]:
        raise RuntimeError(
            f"hidden tests may not start processes in the grader ({event}); run the project's "
            "commands with apptest.subprocess, which starts them in its own process"
        )


def _launch_browser(timeout: float):
    """Start the grader's headless Chromium (see :mod:`apptest_browser`)."""
    import apptest_browser  # imported already (apptest_seal.preload): no lookup now

    _LAUNCHING[0] = True
    try:
        return apptest_browser.Browser(timeout=timeout)
    finally:
        _LAUNCHING[0] = False


def _helper_names(hidden: str) -> set:
    """The top-level names of the hidden tests' own modules and packages (their helpers)."""
    out = set()
    for entry in os.listdir(hidden):
        path = os.path.join(hidden, entry)
        name = entry[:-3] if entry.endswith(".py") and os.path.isfile(path) else entry
        if name.isidentifier() and (name != entry or os.path.isdir(path)):
            out.add(name)
    return out


def _project_names(candidates, helpers) -> list:
    """The project's top-level names that tests import through proxies: not the standard
    library, not pytest, not this directory's modules, not the hidden tests' ``helpers``
    (those stay this process's own, whatever the project names its files)."""
    import importlib.util

    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    out = []
    for name in candidates:
        if not isinstance(name, str) or not name.isidentifier() or name in stdlib:
            continue
        if name in helpers:
            continue
        try:
            if importlib.util.find_spec(name) is not None:
                continue
        except (ImportError, ValueError):
            continue
        out.append(name)
    return out


def _recorder(here: str, project: str, scratch: str, cfg: dict, state: dict):
    import pathlib

    test_timeout = float(cfg["test_timeout"])
    # the run must end (and report) before the host's limit: no test runs past this point
    deadline = time.monotonic() + float(cfg["grade_timeout"]) - float(cfg.get("reserve", 4))

    def scrub(text: str) -> str:
        return text.replace(here, "<grader>").replace(project, "<project>")

    def on_alarm(signum, frame):
        raise Timeout(f"test exceeded {test_timeout}s")

    class Recorder:
        """Records outcomes; one project process per test; per-test and whole-run limits."""

        def _guard(self) -> None:
            left = deadline - time.monotonic()
            signal.signal(signal.SIGALRM, on_alarm)
            signal.setitimer(signal.ITIMER_REAL, max(0.5, min(test_timeout, left)), 1.0)

        def _unguard(self) -> None:
            signal.setitimer(signal.ITIMER_REAL, 0)

        @pytest.fixture
        def tmp_path(self):
            """A fresh directory the project's process may use: named without the test's
            name (which the project must not learn) and unguessably, made with its final
            mode (shared, sticky) in the grader's scratch, which the project cannot list
            or write."""
            return pathlib.Path(apptest_files.make_dir(scratch, "t", apptest_files.SHARED))

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_setup(self, item):
            apptest.end_scope()
            if deadline - time.monotonic() < 0.5:
                state["out_of_time"] = True
                pytest.skip("the grading time ran out")
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
                apptest.end_scope()

        def pytest_collection_finish(self, session):
            apptest.end_scope()
            state["source_ok_after_collection"] = _digests(here, cfg["hashes"]) == cfg["hashes"]

        def pytest_collectreport(self, report):
            if report.failed:
                lines = [ln for ln in str(report.longrepr).splitlines() if ln.startswith("E ")]
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
            if report.failed and report.nodeid not in state["details"]:
                lines = [ln for ln in str(report.longrepr).splitlines() if ln.startswith("E ")]
                text = " | ".join(ln[1:].strip() for ln in lines[:3]) or "failed"
                state["details"][report.nodeid] = scrub(text)[:400]

    return Recorder()


def _pytest_args(here: str, scratch: str, files) -> list:
    return [
        "-c",
        os.path.join(here, "pytest.ini"),
        "--rootdir",
        here,
        "-p",
        "no:cacheprovider",
        "--noconftest",
        "--continue-on-collection-errors",
        "--import-mode=importlib",
        "-q",
        "--color=no",
        "--basetemp",
        os.path.join(scratch, "b"),
        *(os.path.join(here, f) for f in files),
    ]


def _write_report(report_fd: int, state: dict, secret: str) -> None:
    """The signed report, on the standard output this process was started with; then exit."""
    state["secret"] = secret
    data = json.dumps(state).encode()
    while data:
        data = data[os.write(report_fd, data) :]
    os._exit(0)


def _hidden_sources(here: str, hashes: dict) -> dict:
    out = {}
    for rel in hashes:
        if rel.startswith("hidden/") and rel.endswith(".py"):
            with open(os.path.join(here, rel), "rb") as f:
                out[rel] = f.read().decode("utf-8", "replace")
    return out


def _start_spawner(worker: list, cwd: str):
    """Grader and project share a user (the local backend): this process starts the
    spawner (with users, the host starts it as the project's user)."""
    return subprocess.Popen(
        worker,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        cwd=cwd,
    )


def _configure_fixtures(here: str, cfg: dict, scratch: str) -> None:
    def read_hidden(rel: str) -> bytes:
        with open(os.path.join(here, rel), "rb") as f:
            return f.read()

    apptest_fullstack.configure(
        cfg.get("app"),
        cfg.get("services") or {},
        lambda: _launch_browser(float(cfg["test_timeout"])),
        read_hidden,
        scratch,
    )


def _finish(spawner) -> None:
    """End the last test's worker, the mock services and the browser, and the spawner."""
    for step in (apptest.end_scope, apptest_fullstack.shutdown):
        try:
            step()
        except BaseException:
            pass
    if spawner is not None:
        try:
            os.killpg(spawner.pid, signal.SIGKILL)
        except OSError:
            pass


def main(here: str, cfg: dict) -> None:
    """Run the hidden tests named in ``cfg`` and write the signed report to the original
    standard output; never returns (ends with ``os._exit``)."""
    secret = cfg.pop("secret")
    report_fd = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.umask(0)  # the project's process may change what the tests write, and vice versa
    hidden = os.path.join(here, "hidden")
    state = {
        "tests": {},
        "collect_errors": {},
        "details": {},
        "source_ok": _digests(here, cfg["hashes"]) == cfg["hashes"],
        "source_ok_after_collection": None,
        "source_ok_at_end": None,
        "sealed": bool(cfg.get("sealed")),
    }
    problem = apptest_seal.unsealed(here, (hidden,)) if cfg.get("sealed") else None
    if problem:  # never the project's doing: nothing of it has run yet
        state["unsealed"] = problem.replace(here, "<grader>")
        _write_report(report_fd, state, secret)
    sys.path.append(hidden)  # helper modules of the hidden tests, after the standard library
    names = _project_names(cfg["names"], _helper_names(hidden))
    # every import the grader will need, now: none of the project's code has run yet
    apptest_seal.preload(_hidden_sources(here, cfg["hashes"]), cfg["names"])
    # where tmp_path and the app's directories go: the project may enter, not list or write
    scratch = apptest_files.make_dir(
        tempfile.gettempdir(), ".agentgym-tmp-", apptest_files.TRAVERSE_ONLY
    )
    worker = list(cfg.get("worker") or [])
    start_dir = os.getcwd()  # the workspace: worker paths are relative to it
    project = os.path.abspath(cfg["project"])
    os.chdir(project)
    for var in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
        os.environ.pop(var, None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    sys.dont_write_bytecode = True
    spawner = _start_spawner(worker, start_dir) if worker else None
    apptest.configure(cfg["socket"], names, cfg["test_timeout"], kill=bool(worker))
    apptest.install()
    _configure_fixtures(here, cfg, scratch)
    imports = apptest_seal.Imports()
    sys.addaudithook(lambda event, args: (_no_processes(event, args), imports.event(event, args)))
    imports.watch()
    try:
        plugins = [_recorder(here, project, scratch, cfg, state), apptest_fullstack.FullStack()]
        pytest.main(_pytest_args(here, scratch, cfg["files"]), plugins=plugins)
    except BaseException as e:
        text = f"{type(e).__name__}: {e}"
        state["crash"] = text.replace(here, "<grader>").replace(project, "<project>")[:300]
    _finish(spawner)
    # the grader's files and the hidden tests, checked again once every test has run
    state["source_ok_at_end"] = _digests(here, cfg["hashes"]) == cfg["hashes"]
    state["late_imports"] = imports.late(hidden, names)
    state["oom_pinned"] = not apptest._settings.get("unpinned")
    _write_report(report_fd, state, secret)
