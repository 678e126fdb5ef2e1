"""The grading boundary as built (issue 30), checked on the real Docker sandbox.

* directories the project can reach are made safely: ``tmp_path`` is shared and sticky,
  made with that mode under an unguessable name in a scratch directory the project can
  enter but not list or write;
* the spawner imports its standard modules before the project's directory joins
  ``sys.path`` (a project file named like a module one of them imports lazily never runs
  in the spawner).

A task written here (a copy of ``rate_limiter`` with one more hidden test file) asks the
project's own process what it sees; the hidden test compares that in the grader.
"""

from __future__ import annotations

import json
import shutil

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
"""

BOUNDARY_TESTS = """\
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


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> AppTask:
    need_docker()
    root = tmp_path_factory.mktemp("boundary") / "rate_limiter"
    shutil.copytree(BUILTIN_TASKS_DIR / "rate_limiter", root)
    (root / "tests_hidden" / "test_boundary.py").write_text(BOUNDARY_TESTS)
    return load_task(root)


def grade_with_files(task: AppTask, extra: dict[str, str]) -> tuple:
    from agentgym.sandbox import open_sandbox

    files = {**task.initial_files(), **{k: v.encode() for k, v in extra.items()}}
    with open_sandbox("docker", timeout=120) as sb:
        result = grade(task, files, sb, details=True)
        listing = sb.list_files()
    return result, listing


def test_tmp_path_is_made_safely(task):
    result, _ = grade_with_files(task, {"dirprobe.py": PROBE_MODULE})
    test = "test_boundary.py::test_tmp_path_is_shared_sticky_and_unguessable"
    assert result.per_test[test] == "passed", json.dumps(result.details)


def test_the_spawner_preloads_before_the_project_joins_sys_path(task):
    _, listing = grade_with_files(task, {"_winapi.py": WINAPI_MARKER})
    assert "spawner-ran-project-code" not in listing
