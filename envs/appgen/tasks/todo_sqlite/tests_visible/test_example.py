import os
import subprocess
import sys

from todo.service import TodoService


def test_add_and_list(tmp_path):
    svc = TodoService(str(tmp_path / "t.db"))
    task = svc.add("Buy milk", priority="high", tags=["shop"])
    assert task.id == 1
    assert [t.title for t in svc.list()] == ["Buy milk"]
    svc.close()


def test_cli_add(tmp_path):
    db = str(tmp_path / "t.db")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "todo",
            "--db",
            db,
            "add",
            "Pay rent",
            "--priority",
            "high",
            "--due",
            "2024-05-01",
            "--tag",
            "home",
        ],
        capture_output=True,
        text=True,
        cwd=os.getcwd(),
        timeout=30,
    )
    assert out.stdout.strip() == "added 1", out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "todo", "--db", db, "list"],
        capture_output=True,
        text=True,
        cwd=os.getcwd(),
        timeout=30,
    )
    assert out.stdout.strip() == "[ ] #1 Pay rent (high) due 2024-05-01 [home]"
