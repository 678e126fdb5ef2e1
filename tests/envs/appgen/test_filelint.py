"""check-task flags hidden tests that touch files without ``apptest.files`` (issue 30)."""

from __future__ import annotations

import types

from agentgym.envs.appgen import load_tasks
from agentgym.envs.appgen.filelint import plain_file_access

HIDDEN = """\
import json, os, shutil, sqlite3
from pathlib import Path
from apptest import files
import apptest

HERE = os.path.dirname(__file__)


def test_flagged(tmp_path):
    with open(tmp_path / "a") as f:          # 10
        f.read()
    (tmp_path / "b").write_text("x")         # 12
    Path(str(tmp_path)).read_bytes()         # 13
    sqlite3.connect(str(tmp_path / "db"))    # 14
    os.listdir(tmp_path)                     # 15
    shutil.copy(tmp_path / "a", "/tmp/x")    # 16
    with (tmp_path / "c").open("rb"):        # 17
        pass
    data_path = str(tmp_path)
    data_path.open()                         # 20


def test_not_flagged(tmp_path, app):
    files.write_text(tmp_path / "a", "x")
    apptest.files.read_bytes(tmp_path / "a")
    with open(os.path.join(HERE, "fixtures", "x.json")) as f:  # the test's own file
        json.load(f)
    os.path.exists(tmp_path / "a")
    app.get("/api").json()
    files.sqlite(tmp_path / "db").execute("SELECT 1")
"""


def test_plain_file_access_is_flagged_with_the_line_and_the_fix():
    task = types.SimpleNamespace(hidden_tests={"test_x.py": HIDDEN.encode(), "f.json": b"{}"})
    found = plain_file_access(task)
    assert [int(f.split(":")[1]) for f in found] == [10, 12, 13, 14, 15, 16, 17, 20], found
    assert "use files.sqlite" in found[3] and "use files.listdir" in found[4]
    assert all(f.startswith("test_x.py:") for f in found)


def test_every_shipped_task_goes_through_apptest_files():
    assert {t.name: plain_file_access(t) for t in load_tasks() if plain_file_access(t)} == {}
