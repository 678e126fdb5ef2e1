"""``apptest.files``: how hidden tests touch paths the project can reach (issue 30).

The module runs in the grader's process inside the sandbox; here it is loaded by path on
the host (it needs only the standard library) and faced with what a project can put in a
directory it shares with the grader: symlinks (to a file, in the middle of a path, to a
directory, dangling), FIFOs, hard links, a directory renamed under a walk. Every one is
refused without following it or blocking; plain files work as ``open`` would.
"""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import stat
import threading

import pytest

from agentgym.envs.appgen.grader import __file__ as grader_init

_spec = importlib.util.spec_from_file_location(
    "apptest_files", os.path.join(os.path.dirname(grader_init), "apptest_files.py")
)
files = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(files)


@pytest.fixture
def shared(tmp_path):
    """A shared directory with a secret outside it (the grader's own file)."""
    (tmp_path / "grader").mkdir()
    secret = tmp_path / "grader" / "hidden_test.py"
    secret.write_text("def test_secret(): ...\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    return shared, secret


def test_plain_files_read_write_append_list_and_stat(shared):
    d, _ = shared
    files.write_text(d / "a.txt", "one\n")
    files.append_text(d / "a.txt", "two\n")
    assert files.read_text(d / "a.txt") == "one\ntwo\n"
    files.write_bytes(d / "a.txt", b"x")  # truncates first
    assert files.read_bytes(d / "a.txt") == b"x" and files.getsize(d / "a.txt") == 1
    with files.open(d / "a.txt", "r+b") as f:
        f.seek(0, 2)
        f.write(b"yz")
    with files.open(d / "a.txt") as f:
        assert f.read() == "xyz"
    (d / "sub").mkdir()
    assert files.listdir(d) == ["a.txt", "sub"] and files.listdir(d / "sub") == []
    assert files.exists(d / "a.txt") and not files.exists(d / "nope")
    with pytest.raises(FileNotFoundError):
        files.read_bytes(d / "nope")


def test_symlinks_are_refused_never_followed(shared):
    d, secret = shared
    (d / "link").symlink_to(secret)
    (d / "dirlink").symlink_to(secret.parent)
    (d / "dangling").symlink_to(secret.parent / "new.py")
    for make in (
        lambda: files.read_bytes(d / "link"),
        lambda: files.write_text(d / "link", "import os\n"),
        lambda: files.append_text(d / "link", "x"),
        lambda: files.read_bytes(d / "dirlink" / "hidden_test.py"),
        lambda: files.write_text(d / "dirlink" / "stringprep.py", "x"),
        lambda: files.write_text(d / "dangling", "x"),
        lambda: files.listdir(d / "dirlink"),
        lambda: files.getsize(d / "link"),
    ):
        with pytest.raises(files.UnsafePath):
            make()
    assert secret.read_text() == "def test_secret(): ...\n"
    assert sorted(os.listdir(secret.parent)) == ["hidden_test.py"]  # nothing created there


def test_fifos_and_hard_links_are_refused_without_blocking(shared):
    d, secret = shared
    os.mkfifo(d / "fifo")
    done = threading.Event()

    def read():
        for call in (files.read_bytes, lambda p: files.write_bytes(p, b"x")):
            with pytest.raises(files.UnsafePath):
                call(d / "fifo")
        done.set()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    assert done.wait(5), "a FIFO blocked the grader"
    (d / "mine").write_text("ok")
    os.link(d / "mine", d / "alias")
    with pytest.raises(files.UnsafePath, match="hard links"):
        files.write_text(d / "alias", "overwritten")
    assert (d / "mine").read_text() == "ok"
    with pytest.raises(files.UnsafePath):
        files.read_bytes(d)  # a directory is not a file either


def test_a_directory_swapped_for_a_symlink_mid_path_is_refused(shared):
    d, secret = shared
    (d / "data").mkdir()
    (d / "data" / "wal.log").write_bytes(b"ok")
    assert files.read_bytes(d / "data" / "wal.log") == b"ok"
    os.rename(d / "data", d / "old")
    (d / "data").symlink_to(secret.parent)
    with pytest.raises(files.UnsafePath, match="symlink"):
        files.write_bytes(d / "data" / "hidden_test.py", b"import evil\n")
    assert secret.read_text() == "def test_secret(): ...\n"


def test_paths_with_dot_dot_are_refused(shared):
    d, _ = shared
    with pytest.raises(files.UnsafePath, match=r"\.\."):
        files.read_bytes(d / ".." / "grader" / "hidden_test.py")


def test_sqlite_reads_a_private_copy(shared):
    d, _ = shared
    conn = sqlite3.connect(d / "app.db")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    copy = files.sqlite(d / "app.db")
    assert copy.execute("SELECT x FROM t").fetchall() == [(1,)]
    copy.execute("DELETE FROM t")
    copy.commit()
    assert conn.execute("SELECT COUNT(*) FROM t").fetchone() == (1,)  # the project's is untouched
    os.replace(d / "app.db", d / "real.db")
    (d / "app.db").symlink_to(d / "real.db")
    with pytest.raises(files.UnsafePath):
        files.sqlite(d / "app.db")


def test_make_dir_gives_the_final_mode_at_once(tmp_path):
    path = files.make_dir(str(tmp_path), "t", files.SHARED)
    st = os.lstat(path)
    assert stat.S_IMODE(st.st_mode) == 0o1777 and stat.S_ISDIR(st.st_mode)
    assert os.path.basename(path).startswith("t") and len(os.path.basename(path)) > 8
