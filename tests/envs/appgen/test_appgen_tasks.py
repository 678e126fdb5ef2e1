"""Task directories: the built-in set, loading, validation, hashing, hidden-test counting."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agentgym.envs.appgen import protocol
from agentgym.envs.appgen.taskset import (
    BUILTIN_TASKS_DIR,
    builtin_task_names,
    content_hash,
    load_task,
    load_tasks,
)
from agentgym.errors import DataError, UnknownNameError

TASKS = load_tasks()


def test_builtin_set_has_twelve_graded_tasks():
    assert len(TASKS) >= 12
    assert [t.name for t in TASKS] == builtin_task_names() == sorted(builtin_task_names())
    assert {t.difficulty for t in TASKS} == {"easy", "medium", "hard"}
    assert len({t.content_hash for t in TASKS}) == len(TASKS)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_task_is_complete(task):
    project = task.reference_files()
    assert len([p for p in project if p.endswith(".py") and not p.startswith("tests/")]) >= 3
    assert len(task.solution) >= 3
    assert task.visible_tests, "a task shows at least one example test"
    assert task.num_hidden_tests >= 5
    assert task.spec.strip()
    assert set(task.oracle_order) == set(task.solution)
    # hidden tests stay hidden: none of them is in what the agent starts with
    assert not set(task.hidden_tests) & set(task.initial_files())


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_oracle_writes_survive_the_protocol(task):
    """Every solution file, written the way the oracle writes it, parses back unchanged."""
    for path, data in task.solution.items():
        text = data.decode("utf-8")
        parsed = protocol.parse_actions(f'<write path="{path}">\n{text}</write>')
        assert parsed == [protocol.Write(path, text)], path


def _copy(tmp_path: Path, name: str = "rate_limiter") -> Path:
    dest = tmp_path / name
    shutil.copytree(BUILTIN_TASKS_DIR / name, dest)
    return dest


def test_content_hash_tracks_every_file(tmp_path):
    task_dir = _copy(tmp_path)
    before = load_task(task_dir)
    assert before.content_hash == load_task(BUILTIN_TASKS_DIR / "rate_limiter").content_hash
    hidden = task_dir / "tests_hidden" / "test_ratelimit.py"
    hidden.write_text(hidden.read_text() + "\n# changed\n")
    after = load_task(task_dir)
    assert after.content_hash != before.content_hash
    assert after.task_id != before.task_id
    assert after.content_hash == content_hash(task_dir)


def test_parametrized_tests_are_counted(tmp_path):
    task_dir = _copy(tmp_path)
    (task_dir / "tests_hidden" / "test_extra.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.parametrize('x', [1, 2, 3])\n"
        "def test_p(x):\n    pass\n\n"
        "class TestGroup:\n    def test_a(self):\n        pass\n\n"
        "def helper():\n    pass\n"
    )
    task = load_task(task_dir)
    extra = {t.test_id: t.count for t in task.expected_tests if t.file == "test_extra.py"}
    assert extra == {"test_extra.py::test_p": 3, "test_extra.py::TestGroup::test_a": 1}


def test_non_literal_parametrize_is_refused(tmp_path):
    task_dir = _copy(tmp_path)
    (task_dir / "tests_hidden" / "test_extra.py").write_text(
        "import pytest\nVALUES = [1, 2]\n\n"
        "@pytest.mark.parametrize('x', VALUES)\ndef test_p(x):\n    pass\n"
    )
    with pytest.raises(DataError, match="literal list"):
        load_task(task_dir)


@pytest.mark.parametrize(
    "breakage, message",
    [
        (lambda d: (d / "spec.md").unlink(), "spec.md"),
        (lambda d: (d / "task.toml").write_text("difficulty = 'extreme'\n"), "difficulty"),
        (lambda d: (d / "task.toml").write_text("[limits]\nmax_turn = 3\n"), "max_turn"),
        (lambda d: (d / "task.toml").write_text("[oracle]\norder = ['nope.py']\n"), "nope.py"),
        (lambda d: shutil.rmtree(d / "tests_hidden"), "no hidden tests"),
        (lambda d: [p.unlink() for p in list((d / "solution").rglob("*.py"))[1:]], "at least 3"),
    ],
)
def test_broken_task_dirs_say_what_is_wrong(tmp_path, breakage, message):
    task_dir = _copy(tmp_path)
    breakage(task_dir)
    with pytest.raises(DataError, match=message):
        load_task(task_dir)


def test_task_selection_by_name_and_extra_dirs(tmp_path):
    assert [t.name for t in load_tasks(["kv_wal", "csv_report"])] == ["csv_report", "kv_wal"]
    with pytest.raises(UnknownNameError, match="Did you mean"):
        load_tasks(["kv_wall"])
    extra = tmp_path / "more"
    extra.mkdir()
    copied = _copy(extra, "rate_limiter")
    (copied / "spec.md").write_text("# A different spec\n")
    tasks = {t.name: t for t in load_tasks(task_dirs=[extra])}
    assert len(tasks) == len(TASKS)
    assert tasks["rate_limiter"].spec == "# A different spec\n"
