"""The grading boundary as built (issue 30), checked on the real Docker sandbox.

* directories the project can reach are made safely: ``tmp_path`` is shared and sticky,
  made with that mode under an unguessable name in a scratch directory the project can
  enter but not list or write;
* the spawner imports its standard modules before the project's directory joins
  ``sys.path`` (a project file named like a module one of them imports lazily never runs
  in the spawner);
* the grader runs as an unprivileged uid of its own (no capability), its modules and the
  hidden tests are root's (0640 in a 0750 directory), nothing on its ``sys.path`` can be
  written by it, and its own directory comes after the standard library;
* every module the grader imports is imported before the project's code could run (the
  report lists any later import: none);
* the tamper check covers the grader's modules until the report is written: a grader
  module changed (by root, from outside) while the last test runs voids the run.

A task written here (a copy of ``rate_limiter`` with one more hidden test file) asks the
project's own process what it sees; the hidden test compares that in the grader.
"""

from __future__ import annotations

import json
import shutil
import threading

import pytest

from agentgym.envs.appgen.grading import grade
from agentgym.envs.appgen.taskset import BUILTIN_TASKS_DIR, AppTask, load_task

from .conftest import need_docker

pytestmark = pytest.mark.docker

PROBE_MODULE = """\
import os


def dirs(path):
    parent = os.path.dirname(path)
    try:
        os.listdir(parent)
        listed = True
    except OSError:
        listed = False
    return {
        "mode": os.stat(path).st_mode & 0o7777,
        "parent_mode": os.stat(parent).st_mode & 0o7777,
        "parent_listed": listed,
        "parent_writable": os.access(parent, os.W_OK),
        "name": os.path.basename(path),
    }


def names_under(top):
    # every name this process can list under top
    out = []
    for d, dirs, files in os.walk(top):
        out += dirs + files
    return out


def lower_oom_score():
    # this worker's OOM score after it tried to set it to 0, and a child's after it tried
    import subprocess

    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("0")
    except OSError:
        pass
    child = subprocess.run(
        ["sh", "-c", "echo 0 > /proc/self/oom_score_adj; cat /proc/self/oom_score_adj"],
        capture_output=True, text=True,
    ).stdout.strip()
    with open("/proc/self/oom_score_adj") as f:
        return [int(f.read()), int(child or -1)]
"""

BOUNDARY_TESTS = """\
import os
import sys


def test_the_grader_is_unprivileged_and_sealed():
    import apptest
    import apptest_runner

    assert os.getuid() not in (0, 1000) and os.getgid() != 0
    with open("/proc/self/status") as f:
        caps = dict(line.split(":", 1) for line in f if line.startswith("Cap"))
    assert int(caps["CapEff"], 16) == 0 and int(caps["CapPrm"], 16) == 0, caps
    here = os.path.dirname(apptest.__file__)
    st = os.stat(here)
    assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o750), (st.st_uid, oct(st.st_mode))
    for module in (apptest, apptest_runner):
        st = os.stat(module.__file__)
        assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o640)
        assert not os.access(module.__file__, os.W_OK)
    for entry in sys.path:
        assert not (os.path.exists(entry) and os.access(entry, os.W_OK)), entry
    stdlib = os.path.dirname(os.__file__)
    assert sys.path.index(here) > sys.path.index(stdlib), sys.path
    assert sys.path.index(os.path.join(here, "hidden")) > sys.path.index(stdlib), sys.path


def test_the_grader_cannot_be_traced():
    import ctypes

    assert ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE: not dumpable


def test_the_project_cannot_name_the_sealed_directory():
    import apptest
    import dirprobe

    here = os.path.dirname(apptest.__file__)
    seen = dirprobe.names_under("/tmp")
    assert os.path.basename(here) not in seen, seen
    parent = os.stat(os.path.dirname(here))
    assert (parent.st_uid, parent.st_mode & 0o7777) == (0, 0o710), oct(parent.st_mode)


def test_the_project_cannot_lower_its_oom_score():
    import dirprobe

    assert dirprobe.lower_oom_score() == [1000, 1000]


def test_tmp_path_is_shared_sticky_and_unguessable(tmp_path):
    import dirprobe

    seen = dirprobe.dirs(str(tmp_path))
    assert seen["mode"] == 0o1777, oct(seen["mode"])
    assert seen["parent_mode"] == 0o711 and not seen["parent_listed"], seen
    assert not seen["parent_writable"], seen
    assert len(seen["name"]) > 8, seen  # not t0, t1, ...: nothing to guess ahead
"""

#: ``mimetypes`` (imported by ``http.server``, which the spawner preloads) tries
#: ``import _winapi`` and goes on without it on Linux: a project file of that name ran in
#: the spawner when the preload came after the project joined ``sys.path``
WINAPI_MARKER = """\
import os
with open("/workspace/spawner-ran-project-code", "w") as f:
    f.write(str(os.getpid()))
"""


#: a helper module of the hidden tests, and a test whose assertion it decides with plain
#: data (the pattern check-task flags): the grader's helper says no
VERDICTS = "def is_even(n):\n    return n % 2 == 0\n"
HELPER_TEST = "import verdicts\n\n\ndef test_a_helper_decides():\n    assert verdicts.is_even(3)\n"


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> AppTask:
    need_docker()
    root = tmp_path_factory.mktemp("boundary") / "rate_limiter"
    shutil.copytree(BUILTIN_TASKS_DIR / "rate_limiter", root)
    (root / "tests_hidden" / "test_boundary.py").write_text(BOUNDARY_TESTS)
    (root / "tests_hidden" / "verdicts.py").write_text(VERDICTS)
    (root / "tests_hidden" / "test_helpers.py").write_text(HELPER_TEST)
    return load_task(root)


def grade_with_files(task: AppTask, extra: dict[str, str]) -> tuple:
    from agentgym.sandbox import open_sandbox

    files = {**task.initial_files(), **{k: v.encode() for k, v in extra.items()}}
    with open_sandbox("docker", timeout=120) as sb:
        result = grade(task, files, sb, details=True)
        listing = sb.list_files()
    return result, listing


def test_tmp_path_is_made_safely_and_the_grader_sealed(task):
    result, _ = grade_with_files(task, {"dirprobe.py": PROBE_MODULE})
    for test in (
        "test_boundary.py::test_tmp_path_is_shared_sticky_and_unguessable",
        "test_boundary.py::test_the_grader_is_unprivileged_and_sealed",
        "test_boundary.py::test_the_grader_cannot_be_traced",
        "test_boundary.py::test_the_project_cannot_name_the_sealed_directory",
        "test_boundary.py::test_the_project_cannot_lower_its_oom_score",
    ):
        assert result.per_test[test] == "passed", json.dumps(result.details)
    assert result.late_imports == [] and not result.tampered, result


def test_a_grader_module_changed_during_the_run_voids_it(tmp_path):
    """Root (the host, from outside: nothing in the grading run is root) appends to a
    grader module while the last test runs: the check before the report sees it."""
    need_docker()
    from agentgym.sandbox import docker_client, open_sandbox

    root = tmp_path / "rate_limiter"
    shutil.copytree(BUILTIN_TASKS_DIR / "rate_limiter", root)
    (root / "tests_hidden" / "test_zz_last.py").write_text(
        "import time\n\n\ndef test_waits():\n    time.sleep(6)\n"
    )
    task = load_task(root)
    change = (  # once the grader's files are there: wait into the last test, then append
        "while :; do for d in /tmp/.agentgym-sealed/.agentgym-grader-*; do if [ -e $d/hidden/test_zz_last.py ]; "
        "then sleep 3; echo '# changed' >> $d/apptest_fullstack.py; exit 0; fi; done; "
        "sleep 0.05; done"
    )
    with open_sandbox("docker", timeout=120) as sb:
        api = docker_client().api
        run = api.exec_create(sb.container_id, ["timeout", "60", "sh", "-c", change], user="0:0")
        tamper = threading.Thread(target=api.exec_start, args=(run,), daemon=True)
        tamper.start()
        result = grade(task, task.reference_files(), sb)
        tamper.join(30)
    assert result.tampered and result.passed == 0, result
    assert any("grader's files" in e for e in result.errors), result.errors


def test_a_project_module_never_shadows_a_hidden_helper(task):
    """A project file named like a helper module of the hidden tests (``verdicts.py``,
    whose ``is_even`` says yes to anything) is not what the hidden tests import: the
    assertion the helper decides stays failed, as for the honest project."""
    shadow = {"verdicts.py": "def is_even(n):\n    return True\n", "dirprobe.py": PROBE_MODULE}
    result, _ = grade_with_files(task, shadow)
    assert result.per_test["test_helpers.py::test_a_helper_decides"] == "failed", result
    assert "test_boundary.py::test_the_grader_is_unprivileged_and_sealed" in result.per_test
    assert result.late_imports == [] and not result.tampered, result


def test_the_spawner_preloads_before_the_project_joins_sys_path(task):
    _, listing = grade_with_files(task, {"_winapi.py": WINAPI_MARKER})
    assert "spawner-ran-project-code" not in listing
