import json
import os
import sys

from apptest import files, subprocess

ROOT = os.getcwd()


def todo(db, *args):
    return subprocess.run(
        [sys.executable, "-m", "todo", "--db", str(db), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )


def test_cli_flow(tmp_path):
    db = tmp_path / "t.db"
    assert (
        todo(
            db,
            "add",
            "Pay rent",
            "--priority",
            "high",
            "--due",
            "2024-05-01",
            "--tag",
            "home",
            "--tag",
            "bills",
        ).stdout.strip()
        == "added 1"
    )
    assert todo(db, "add", "Call mum").stdout.strip() == "added 2"
    assert todo(db, "done", "2").stdout.strip() == "completed 2"
    assert todo(db, "list").stdout.splitlines() == [
        "[ ] #1 Pay rent (high) due 2024-05-01 [bills, home]"
    ]
    assert todo(db, "list", "--all").stdout.splitlines() == [
        "[ ] #1 Pay rent (high) due 2024-05-01 [bills, home]",
        "[x] #2 Call mum (medium)",
    ]
    assert todo(db, "list", "--done").stdout.splitlines() == ["[x] #2 Call mum (medium)"]
    assert todo(db, "reopen", "2").stdout.strip() == "reopened 2"
    assert todo(db, "delete", "1").stdout.strip() == "deleted 1"
    assert todo(db, "search", "MUM").stdout.splitlines() == ["[ ] #2 Call mum (medium)"]


def test_cli_json_and_sort(tmp_path):
    db = tmp_path / "t.db"
    todo(db, "add", "a", "--priority", "low")
    todo(db, "add", "b", "--priority", "high", "--tag", "x")
    out = todo(db, "list", "--sort", "priority", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [d["id"] for d in data] == [2, 1]
    assert data[0] == {
        "id": 2,
        "title": "b",
        "priority": "high",
        "due": None,
        "done": False,
        "tags": ["x"],
    }
    assert [d["id"] for d in json.loads(todo(db, "list", "--tag", "x", "--json").stdout)] == [2]


def test_cli_errors(tmp_path):
    db = tmp_path / "t.db"
    out = todo(db, "done", "7")
    assert out.returncode == 1
    assert out.stderr.startswith("error:")
    out = todo(db, "add", "x", "--due", "tomorrow")
    assert out.returncode == 1
    assert "error:" in out.stderr


def test_cli_default_db_in_cwd(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run(
        [sys.executable, "-m", "todo", "add", "here"],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        env=env,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert files.exists(tmp_path / "todo.db")
