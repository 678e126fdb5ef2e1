"""The grader's process inside the grading sandbox: runs the hidden tests, reports outcomes.

Started by the host as ``python3 -I -c BOOT`` with the grading bundle on standard input
(these modules, the hidden tests, the configuration and the report secret); BOOT writes
the files into a fresh private directory (mode 0700) and calls :func:`main`. In the
Docker backend this process runs as the grader's own user, so the project's processes
can neither read that directory nor signal or trace this process.

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
    import apptest_browser

    _LAUNCHING[0] = True
    try:
        return apptest_browser.Browser(timeout=timeout)
    finally:
        _LAUNCHING[0] = False


def _project_names(candidates) -> list:
    """The project's top-level names that tests import through proxies: not the standard
    library, not pytest, not this directory's modules (those stay this process's own)."""
    import importlib.util

    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    out = []
    for name in candidates:
        if not isinstance(name, str) or not name.isidentifier() or name in stdlib:
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

    import pytest

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


def main(here: str, cfg: dict) -> None:
    """Run the hidden tests named in ``cfg`` and write the signed report to the original
    standard output; never returns (ends with ``os._exit``)."""
    secret = cfg.pop("secret")
    report_fd = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.umask(0)  # the project's process may change what the tests write, and vice versa
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
    sys.path.insert(0, os.path.join(here, "hidden"))  # helper modules of the hidden tests
    state = {
        "tests": {},
        "collect_errors": {},
        "details": {},
        "source_ok": _digests(here, cfg["hashes"]) == cfg["hashes"],
        "source_ok_after_collection": None,
    }
    spawner = None
    if worker:  # grader and project share a user: this process starts the spawner
        spawner = subprocess.Popen(
            worker,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd=start_dir,
        )
    apptest.configure(
        cfg["socket"], _project_names(cfg["names"]), cfg["test_timeout"], kill=bool(worker)
    )
    apptest.install()
    import apptest_fullstack

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
    sys.addaudithook(_no_processes)
    try:
        import pytest

        args = [
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
        ]
        args += [os.path.join(here, f) for f in cfg["files"]]
        plugins = [_recorder(here, project, scratch, cfg, state), apptest_fullstack.FullStack()]
        pytest.main(args, plugins=plugins)
    except BaseException as e:
        text = f"{type(e).__name__}: {e}"
        state["crash"] = text.replace(here, "<grader>").replace(project, "<project>")[:300]
    try:
        apptest.end_scope()
    except BaseException:
        pass
    try:
        apptest_fullstack.shutdown()
    except BaseException:
        pass
    if spawner is not None:
        try:
            os.killpg(spawner.pid, signal.SIGKILL)
        except OSError:
            pass
    state["secret"] = secret
    data = json.dumps(state).encode()
    while data:
        data = data[os.write(report_fd, data) :]
    os._exit(0)
