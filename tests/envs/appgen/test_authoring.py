"""Writing AppGen tasks: new-task, the full-stack task format, task sets from a path or a
package, the staged prompts, and check-task (on Docker) proving a task sound or not."""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from pathlib import Path

import pytest

from agentgym.cli import main
from agentgym.envs.appgen import check_task, load_task, load_tasks, new_task
from agentgym.envs.appgen.prompts import task_prompt
from agentgym.envs.appgen.taskset import BUILTIN_TASKS_DIR, content_hash
from agentgym.errors import ConfigError, DataError, UnknownNameError

from .conftest import need_docker


def test_new_task_writes_a_loadable_fullstack_task(tmp_path):
    root = new_task("quote_notes", tmp_path)
    task = load_task(root)
    assert root == tmp_path / "quote_notes" and task.name == "quote_notes"
    assert task.app is not None and task.app.browser and task.app.command.endswith("quote_notes")
    assert [s.name for s in task.services] == ["quotes"]
    assert task.oracle_order[0] == "quote_notes/__main__.py"
    assert {t.file for t in task.expected_tests} == {"test_api.py", "test_page.py"}
    assert task.visible_covers == (
        ("test_example.py::test_add_note", ("test_api.py::test_notes",)),
    )
    # nothing of the template's placeholder is left, and hidden files stay hidden
    written = {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*.*")}
    assert not [rel for rel, text in written.items() if "PKG" in rel + text]
    assert not set(task.hidden_tests) & set(task.initial_files())
    copy = tmp_path / "elsewhere" / "quote_notes"
    shutil.copytree(root, copy)
    assert content_hash(copy) == task.content_hash


@pytest.mark.parametrize("name", ["Notes", "x", "1notes", "my-notes", "a" * 42])
def test_new_task_refuses_names_that_are_not_package_names(tmp_path, name):
    with pytest.raises(ConfigError, match="lower-case"):
        new_task(name, tmp_path)


def test_new_task_never_overwrites(tmp_path):
    new_task("notes", tmp_path)
    with pytest.raises(ConfigError, match="exists already"):
        new_task("notes", tmp_path)


def test_cli_new_task(tmp_path, capsys):
    assert main(["appgen", "new-task", "my_notes", "--dir", str(tmp_path)]) == 0
    assert "check-task" in capsys.readouterr().out
    assert load_task(tmp_path / "my_notes").num_hidden_tests == 4
    assert main(["appgen", "new-task", "Bad", "--dir", str(tmp_path)]) == 2
    assert "lower-case" in capsys.readouterr().err


# -- the full-stack sections of task.toml ------------------------------------------------


def _edit(root: Path, old: str, new: str) -> None:
    toml = root / "task.toml"
    text = toml.read_text()
    assert old in text, old
    toml.write_text(text.replace(old, new))


@pytest.mark.parametrize(
    "old, new, message",
    [
        ('command = "python3 -m demo"', "", "needs command"),
        ("port = 8000", "port = 80", "port must be"),
        ("browser = true", "browser = true\nwarmup = 3", "unknown \\[app\\] key"),
        ("browser = true", "browser = true\npage_timeout = 0", "page_timeout must be a number > 0"),
        ('fixture = "fixtures/quotes.json"', 'fixture = "quotes.json"', "not a file under"),
        ('env = "QUOTES_URL"', 'env = "PORT"', "unused UPPER_CASE"),
        ('= ["test_api.py::test_notes"]', '= ["test_api.py::test_nope"]', "must list hidden"),
        ('"test_example.py::test_add_note"', '"test_example.py::test_other"', "not a visible"),
        ("[oracle]", "[[stages]]\nfile = 'stages/9.md'\n\n[oracle]", "needs file"),
    ],
)
def test_bad_fullstack_sections_say_what_is_wrong(tmp_path, old, new, message):
    root = new_task("demo", tmp_path)
    _edit(root, old, new)
    with pytest.raises(DataError, match=message):
        load_task(root)


def test_requirements_must_be_defined_and_staged(tmp_path):
    root = new_task("demo", tmp_path)
    hidden = root / "tests_hidden" / "test_api.py"
    marked = "import pytest\n\n\n@pytest.mark.requirement('tidy')\ndef test_notes("
    hidden.write_text(hidden.read_text().replace("def test_notes(", marked, 1))
    with pytest.raises(DataError, match="tidy"):
        load_task(root)
    _edit(root, "[oracle]", "[requirements.tidy]\nstage = 2\ntext = 'trim notes'\n\n[oracle]")
    with pytest.raises(DataError, match=r"stage must be 1\.\.1"):
        load_task(root)
    _edit(root, "stage = 2", "stage = 1")
    task = load_task(root)
    assert [(r.name, r.stage) for r in task.requirements] == [("tidy", 1)]
    assert next(t for t in task.expected_tests if t.name == "test_notes").requirements == ("tidy",)


# -- staged prompts ---------------------------------------------------------------------


def test_a_later_request_does_not_repeat_the_earlier_ones():
    task = load_task(BUILTIN_TASKS_DIR / "outfit_planner")
    first, second = (st.text.strip() for st in task.stages)
    p1, p2 = task_prompt(task, 0), task_prompt(task, 1)
    assert first in p1 and second not in p1
    assert second in p2 and first not in p2 and "I get cold easily" not in p2
    assert "request 2 of 2" in p2 and "still holds" in p2
    for prompt in (p1, p2):  # the brief and how the app is run are in every conversation
        assert task.spec.strip() in prompt
        assert "`PORT`" in prompt and "`DATA_DIR`" in prompt and "`WEATHER_URL`" in prompt


# -- task sets from a path or an installed package -------------------------------------


def test_tasks_from_a_path_and_mixed_with_names(tmp_path):
    new_task("notes_a", tmp_path / "set")
    new_task("notes_b", tmp_path / "set")
    assert [t.name for t in load_tasks([str(tmp_path / "set")])] == ["notes_a", "notes_b"]
    one = load_tasks([str(tmp_path / "set" / "notes_b"), "kv_wal"])
    assert [t.name for t in one] == ["kv_wal", "notes_b"]
    with pytest.raises(DataError, match="no such task directory"):
        load_tasks([str(tmp_path / "missing")])


def test_tasks_from_an_installed_task_set(tmp_path, monkeypatch):
    """A distribution on sys.path that declares an agentgym.appgen_tasks entry point (the
    way `pip install` leaves one), read by importlib.metadata as in a real install."""
    pkg = tmp_path / "shop_tasks"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""AppGen tasks of the shop team."""\n')
    new_task("cart", pkg)
    info = tmp_path / "shop_tasks-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: shop-tasks\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[agentgym.appgen_tasks]\nshop = shop_tasks\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "shop_tasks", raising=False)
    tasks = load_tasks(["@shop"])
    assert [t.name for t in tasks] == ["cart"] and tasks[0].path == (pkg / "cart").resolve()
    with pytest.raises(UnknownNameError, match="shop"):
        load_tasks(["@shoop"])


# -- check-task on the real sandbox ---------------------------------------------------------


def _short_page_waits(root: Path) -> Path:
    """The starter with ``[app] page_timeout = 3``: check-task grades half-built projects,
    whose page tests wait for a page that is not there (10 s each by default); the starter
    as written is checked by the README's ``agentgym appgen check-task`` (test_readme.py)."""
    toml = root / "task.toml"
    toml.write_text(toml.read_text().replace("[app]\n", "[app]\npage_timeout = 3\n", 1))
    assert load_task(root).app.page_timeout == 3
    return root


@pytest.mark.docker
def test_check_task_proves_the_starter_sound(tmp_path, capsys, monkeypatch):
    need_docker()
    root = _short_page_waits(new_task("quote_notes", tmp_path))
    from agentgym.envs.appgen import checktask

    graded: list[tuple] = []
    grade = checktask._grade

    def counted(task, files, sb, **kw):
        graded.append((task.task_id, tuple(sorted(files.items()))))
        return grade(task, files, sb, **kw)

    monkeypatch.setattr(checktask, "_grade", counted)
    assert main(["appgen", "check-task", str(root), "--json"]) == 0
    assert len(graded) == len(set(graded)), "one set of files was graded twice"
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["ok"] and report["task"] == "quote_notes"
    assert [c["name"] for c in report["checks"]] == [
        "loads",
        "hash stable",
        "files through apptest.files",
        "helpers decide no assertion",
        "reference passes",
        "scaffold fails",
        "visible tests pass",
        "visible within hidden",
        "services start",
    ]


@pytest.mark.docker
def test_check_task_finds_what_is_unsound(tmp_path):
    """A reference that forgets persistence, a visible test the hidden ones never check,
    a fixture route the mock service cannot answer as written, and a hidden test that
    reads the app's file with plain open."""
    need_docker()
    root = _short_page_waits(new_task("quote_notes", tmp_path))
    main_py = root / "solution" / "quote_notes" / "__main__.py"
    source = main_py.read_text()
    forgetful = source.replace('os.path.join(root, "notes.db")', '":memory:"')
    assert forgetful != source
    main_py.write_text(forgetful)
    (root / "tests_visible" / "test_more.py").write_text(
        "def test_has_an_about_page():\n    import quote_notes.about  # noqa: F401\n"
    )
    fixture = root / "tests_hidden" / "fixtures" / "quotes.json"
    routes = json.loads(fixture.read_text())
    routes["routes"].append({"path": "/broken", "status": "two hundred"})
    fixture.write_text(json.dumps(routes))
    hidden = root / "tests_hidden" / "test_api.py"
    hidden.write_text(
        hidden.read_text()
        + "\n\ndef test_log(app):\n    assert open(app.workdir + '/app.log').read() == ''\n"
    )
    report = check_task(root, progress=lambda line: None)
    checks = {c.name: c for c in report.checks}
    assert not report.ok
    assert not checks["reference passes"].ok
    assert "test_api.py::test_notes" in checks["reference passes"].detail
    assert checks["scaffold fails"].ok and checks["hash stable"].ok
    assert (
        not checks["visible tests pass"].ok
        and "test_more.py" in checks["visible tests pass"].detail
    )
    assert not checks["visible within hidden"].ok
    assert "test_more.py::test_has_an_about_page" in checks["visible within hidden"].detail
    assert not checks["services start"].ok
    assert not checks["files through apptest.files"].ok
    assert "test_api.py:" in checks["files through apptest.files"].detail
    assert "open on a path the project can reach" in checks["files through apptest.files"].detail


def test_browser_tasks_warn_on_the_local_backend():
    from .conftest import LOCAL_PROBLEM

    if LOCAL_PROBLEM is not None:
        pytest.skip(LOCAL_PROBLEM)
    import gymnasium as gym

    env = gym.make(
        "agentgym/AppGen-v0",
        sandbox="local",
        unsafe_local_grading=True,  # the local backend grades only with the opt-in
        tasks=["guestbook", "kv_wal"],
    )
    try:
        with pytest.warns(UserWarning, match="'guestbook' is graded in Chromium"):
            env.reset(options={"task": "guestbook"})
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            env.reset(options={"task": "kv_wal"})  # a library task: no warning
    finally:
        env.close()
