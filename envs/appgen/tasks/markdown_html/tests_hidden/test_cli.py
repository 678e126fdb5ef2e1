import os
import sys

from apptest import files, subprocess

ROOT = os.getcwd()


def run(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "mdconv", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )


def test_stdin_to_stdout():
    out = run(stdin="*hi*")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "<p><em>hi</em></p>\n"


def test_file_to_file_with_title(tmp_path):
    src = tmp_path / "in.md"
    files.write_text(src, "# A\n\nb")
    dest = tmp_path / "out.html"
    out = run(str(src), "-o", str(dest), "--title", "T & U")
    assert out.returncode == 0, out.stderr
    assert files.read_text(dest) == (
        '<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n<title>T &amp; U</title>\n'
        "</head>\n<body>\n<h1>A</h1>\n<p>b</p>\n</body>\n</html>\n"
    )


def test_missing_file(tmp_path):
    out = run(str(tmp_path / "nope.md"))
    assert out.returncode == 1
    assert out.stderr.startswith("error:")
