"""Hidden tests that touch files without ``apptest.files``: what ``check-task`` flags.

A hidden test runs in the grader's process. The files it opens in ``tmp_path``, in the
project or in an app's ``DATA_DIR`` are the project's to shape: any name there may be a
symlink to the hidden tests, a FIFO that blocks the grader, or a hard link. ``apptest.files``
refuses all of those; plain ``open`` and its relatives follow them with the grader's
rights. :func:`plain_file_access` finds, statically, every call in a task's hidden test
files (helpers included) that opens, reads, writes or lists a path without it:

* ``open(...)``, ``io.open``, ``os.open``, ``codecs.open``;
* ``pathlib``'s ``read_text``, ``write_text``, ``read_bytes``, ``write_bytes``, and
  ``.open`` on a path (``tmp_path / "x"``, ``Path(...)``, a name ending in ``path``);
* ``os.listdir``, ``os.scandir``, ``os.walk``, ``sqlite3.connect``, ``shutil``'s copies
  and moves.

A call whose arguments mention ``__file__`` (or a name assigned from it) reads the test's
own directory (sealed, the grader's): it is not flagged. Metadata calls that only follow a path (``os.path.exists``,
``getsize``) are left alone: they hand nothing to the project. A call on ``files`` or
``apptest.files`` is the helper itself.
"""

from __future__ import annotations

import ast

from agentgym.envs.appgen.taskset import AppTask

__all__ = ["plain_file_access"]

#: module-qualified calls that open or list a path
_QUALIFIED = {
    ("io", "open"): "io.open",
    ("os", "open"): "os.open",
    ("codecs", "open"): "codecs.open",
    ("os", "listdir"): "os.listdir",
    ("os", "scandir"): "os.scandir",
    ("os", "walk"): "os.walk",
    ("sqlite3", "connect"): "sqlite3.connect",
    ("shutil", "copy"): "shutil.copy",
    ("shutil", "copy2"): "shutil.copy2",
    ("shutil", "copyfile"): "shutil.copyfile",
    ("shutil", "copytree"): "shutil.copytree",
    ("shutil", "move"): "shutil.move",
}
#: pathlib methods that read or write a file
_PATH_METHODS = ("read_text", "write_text", "read_bytes", "write_bytes")
_HELPER_NAMES = ("files",)
_SUGGEST = {
    "open": "files.open / files.read_text / files.write_bytes",
    "sqlite3.connect": "files.sqlite (a private copy)",
    "os.listdir": "files.listdir",
    "os.scandir": "files.listdir",
    "os.walk": "files.listdir",
}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _pathlike(node: ast.AST) -> bool:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return True
    if isinstance(node, ast.Call) and _dotted(node.func).rpartition(".")[2] in ("Path", "PurePath"):
        return True
    return _dotted(node).rpartition(".")[2].lower().endswith("path")


def _what(call: ast.Call) -> str | None:
    """The name of the plain file access ``call`` makes, or None."""
    func = call.func
    if isinstance(func, ast.Name):
        return "open" if func.id == "open" else None
    if not isinstance(func, ast.Attribute):
        return None
    receiver = _dotted(func.value)
    if receiver.rpartition(".")[2] in _HELPER_NAMES:
        return None
    qualified = _QUALIFIED.get((receiver, func.attr))
    if qualified:
        return qualified
    if func.attr in _PATH_METHODS:
        return f".{func.attr}()"
    if func.attr == "open" and _pathlike(func.value):
        return ".open()"
    return None


def _mentions(node: ast.AST, names: set) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _own_names(tree: ast.AST) -> set:
    """``__file__`` and the names assigned from it (``HERE = os.path.dirname(__file__)``)."""
    own = {"__file__"}
    for _ in range(3):  # names made from names made from __file__
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and _mentions(node.value, own):
                own.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return own


def _mentions_own_file(call: ast.Call, own: set) -> bool:
    return any(
        _mentions(arg, own) for arg in (*call.args, *(k.value for k in call.keywords), call.func)
    )


def _line(node: ast.AST) -> tuple:
    return (node.lineno, node.col_offset)


def plain_file_access(task: AppTask) -> list[str]:
    """``"file:line: call ..."`` for every plain file access in the hidden test files."""
    found = []
    for rel, data in sorted(task.hidden_tests.items()):
        if not rel.endswith(".py"):
            continue
        try:
            tree = ast.parse(data.decode("utf-8", "replace"), filename=rel)
        except SyntaxError:
            continue  # the grading reports it as a collection error
        own = _own_names(tree)
        calls = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=_line)
        for node in calls:
            what = None if _mentions_own_file(node, own) else _what(node)
            if what:
                use = _SUGGEST.get(what, "apptest.files")
                found.append(
                    f"{rel}:{node.lineno}: {what} on a path the project can reach; use {use}"
                )
    return found
