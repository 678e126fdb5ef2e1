"""Grading in a real sandbox: reference vs scaffold, and tampering that must gain nothing."""

from __future__ import annotations

import shutil

import pytest

from agentgym.envs.appgen.grading import drop_reason, filter_project, grade
from agentgym.envs.appgen.taskset import BUILTIN_TASKS_DIR, load_task, load_tasks

from .conftest import unsafe_local

TASK = load_task(BUILTIN_TASKS_DIR / "rate_limiter")


def partial(task, n: int = 2) -> dict[str, bytes]:
    """The scaffold plus the first ``n`` files of the reference solution."""
    files = task.initial_files()
    for path in task.oracle_order[:n]:
        files[path] = task.solution[path]
    return files


@pytest.fixture(scope="module")
def honest_partial(backend):
    """Score of the honest partial project; tampering on top of it must not beat it."""
    from agentgym.sandbox import open_sandbox

    with open_sandbox(backend, timeout=120) as sb:
        result = grade(TASK, partial(TASK), sb, **unsafe_local(sb))
    assert 0 < result.passed < result.total, result
    assert not result.tampered and not result.errors
    return result


def test_reference_passes_and_scaffold_fails_every_task(backend):
    from agentgym.sandbox import SandboxPool

    with SandboxPool(size=2, backend=backend, warm=0, timeout=120) as pool:
        for task in load_tasks():
            if task.app is not None and backend != "docker":
                continue  # Chromium starts only in Docker: test_fullstack.py grades these
            with pool.sandbox() as sb:
                ref = grade(task, task.reference_files(), sb, **unsafe_local(sb))
            with pool.sandbox() as sb:
                empty = grade(task, task.initial_files(), sb, **unsafe_local(sb))
            assert (ref.passed, ref.errors, ref.tampered) == (task.num_hidden_tests, [], False), (
                task.name,
                ref,
            )
            assert set(ref.per_test.values()) == {"passed"}
            assert empty.passed == 0 and not empty.tampered, (task.name, empty)


def test_partial_project_scores_strictly_between(honest_partial):
    assert honest_partial.score == honest_partial.passed / honest_partial.total
    assert "failed" in honest_partial.per_test.values()
    assert honest_partial.per_test["test_ratelimit.py::test_bucket_retry_after"] == "passed"


def test_filter_project_drops_config_hooks_and_tests():
    files = {
        "app/main.py": b"",
        "conftest.py": b"",
        "app/conftest.py": b"",
        "pytest.ini": b"",
        "pyproject.toml": b"",
        "setup.cfg": b"",
        "tox.ini": b"",
        "sitecustomize.py": b"",
        "evil.pth": b"",
        "x.dist-info/entry_points.txt": b"",
        "tests/test_a.py": b"",
        "tests/data.json": b"",
        "test_b.py": b"",
        "app/c_test.py": b"",
        "app/__pycache__/m.cpython-311.pyc": b"",
        "data/world.json": b"{}",
    }
    kept, dropped = filter_project(files)
    assert sorted(kept) == ["app/main.py", "data/world.json"]
    assert set(dropped) == set(files) - set(kept)
    assert drop_reason("app/models.py") is None


FORCE_PASS_CONFTEST = """
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""

PATCH_PYTEST = """
import _pytest.python
_pytest.python.Function.runtest = lambda self: None
"""

EXIT_AT_IMPORT = """
import os
os._exit(0)
"""

ATEXIT_FAKE_REPORT = """
import atexit, glob, json, os

def _fake():
    for path in glob.glob(os.path.join(os.getcwd(), "..", ".grader-*", "report.json")):
        with open(path) as f:
            data = json.load(f)
        data["tests"] = {k: "passed" for k in data["tests"]}
        with open(path, "w") as f:
            json.dump(data, f)

atexit.register(_fake)
"""

FAKE_REPORT_NOW = """
import glob, json, os
for d in glob.glob(os.path.join(os.getcwd(), "..", ".grader-*")):
    with open(os.path.join(d, "report.json"), "w") as f:
        json.dump({"secret": "guess", "tests": {}, "source_ok": True}, f)
"""

REWRITE_HIDDEN_TESTS = """
import glob, os
for path in glob.glob(os.path.join(os.getcwd(), "..", ".grader-*", "hidden", "test_*.py")):
    with open(path, "w") as f:
        f.write("def test_bucket_retry_after():\\n    pass\\n")
"""

HIDDEN_NAMED_TESTS = "def test_bucket_partial_refill_and_cap():\n    pass\n"


def _with_init(code: str) -> dict[str, bytes]:
    files = partial(TASK)
    files["ratelimit/__init__.py"] = files["ratelimit/__init__.py"] + code.encode()
    return files


# The project's code never runs in the grader's process any more (see grading.py), so an
# in-process trick changes nothing: "honest" rows must score exactly the honest partial
# project, never be flagged, and the one that kills the project's process scores 0.
@pytest.mark.parametrize(
    "name, files, expected",
    [
        (
            "conftest forcing passes",
            {
                **partial(TASK),
                "conftest.py": FORCE_PASS_CONFTEST.encode(),
                "ratelimit/conftest.py": FORCE_PASS_CONFTEST.encode(),
            },
            "honest",
        ),
        (
            "pytest.ini and pyproject",
            {
                **partial(TASK),
                "pytest.ini": b"[pytest]\naddopts = -p ratelimit.clock\n",
                "pyproject.toml": b"[tool.pytest.ini_options]\npython_files = none\n",
            },
            "honest",
        ),
        (
            "overwritten test files",
            {
                **partial(TASK),
                "tests/test_ratelimit.py": HIDDEN_NAMED_TESTS.encode(),
                "test_ratelimit.py": HIDDEN_NAMED_TESTS.encode(),
            },
            "honest",
        ),
        (
            "start-up hooks",
            {
                **partial(TASK),
                "sitecustomize.py": PATCH_PYTEST.encode(),
                "usercustomize.py": PATCH_PYTEST.encode(),
                "zz.pth": b"import sitecustomize\n",
            },
            "honest",
        ),
        ("atexit rewriting the report", _with_init(ATEXIT_FAKE_REPORT), "honest"),
        ("fake report written early", _with_init(FAKE_REPORT_NOW), "honest"),
        ("pytest patched on import", _with_init(PATCH_PYTEST), "honest"),
        ("hidden tests rewritten on import", _with_init(REWRITE_HIDDEN_TESTS), "honest"),
        ("os._exit on import", _with_init(EXIT_AT_IMPORT), 0),
    ],
)
def test_tampering_gains_nothing(sandbox, honest_partial, name, files, expected):
    result = grade(TASK, files, sandbox, **unsafe_local(sandbox))
    assert result.passed <= honest_partial.passed, (name, result)
    assert result.score <= honest_partial.score
    assert not result.tampered, (name, result)
    if expected == "honest":
        assert result.per_test == honest_partial.per_test, name
    else:
        assert result.passed == expected, (name, result)
        assert any("project's process" in e for e in result.errors), result.errors


def test_a_hanging_test_fails_alone(sandbox, tmp_path):
    task_dir = tmp_path / "rate_limiter"
    shutil.copytree(BUILTIN_TASKS_DIR / "rate_limiter", task_dir)
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace("test_timeout = 20", "test_timeout = 2"))
    task = load_task(task_dir)
    files = task.reference_files()
    window = files["ratelimit/window.py"].decode()
    files["ratelimit/window.py"] = window.replace(
        "    def allow(self):\n        now = self._expire()",
        "    def allow(self):\n        while True:\n            pass\n        now = self._expire()",
    ).encode()
    result = grade(task, files, sandbox, **unsafe_local(sandbox))
    assert result.per_test["test_ratelimit.py::test_sliding_log"] == "failed"
    assert result.per_test["test_ratelimit.py::test_fixed_window_aligned"] == "passed"
    assert result.passed == task.num_hidden_tests - 1
    assert not result.tampered and not result.timed_out


def test_collection_errors_are_reported_without_sandbox_paths(sandbox):
    files = partial(TASK)
    files["ratelimit/clock.py"] = b"raise ImportError('broken clock')\n"
    result = grade(TASK, files, sandbox, **unsafe_local(sandbox))
    assert result.passed == 0
    assert set(result.per_test.values()) == {"not run"}
    assert any("broken clock" in e for e in result.errors)
    assert not any(".grader-" in e or "/workspace" in e for e in result.errors)


def test_running_out_of_grading_time_keeps_what_passed(sandbox, tmp_path):
    """Tests that hang eat the grading time; those that passed before it ran out still count,
    and the run is neither flagged nor lost."""
    task_dir = tmp_path / "rate_limiter"
    shutil.copytree(BUILTIN_TASKS_DIR / "rate_limiter", task_dir)
    toml = task_dir / "task.toml"
    text = toml.read_text().replace("test_timeout = 20", "test_timeout = 2")
    toml.write_text(text.replace("grade_timeout = 120", "grade_timeout = 10"))
    task = load_task(task_dir)
    files = partial(task)
    files["ratelimit/window.py"] = (
        b"import time\n\n\nclass FixedWindow:\n    def __init__(self, *a, **k):\n"
        b"        time.sleep(60)\n\n\nSlidingLog = FixedWindow\n"
    )
    result = grade(task, files, sandbox, **unsafe_local(sandbox))
    assert not result.tampered and not result.timed_out, result.errors
    bucket = [t for t in result.per_test if "test_bucket_" in t]
    assert bucket and all(result.per_test[t] == "passed" for t in bucket)
    assert result.per_test["test_ratelimit.py::test_fixed_window_aligned"] == "failed"
    assert result.per_test["test_ratelimit.py::test_system_clock_default"] == "skipped"
    assert any("ran out" in e for e in result.errors)
