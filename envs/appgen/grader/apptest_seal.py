"""The grader's code stays the grader's: sealed files, and every import done up front.

Runs in the grader's process inside the grading sandbox (Python 3.8+, standard library
and pytest). Two rules keep code of the project out of this process even if it managed
to write a file somewhere:

* **Nothing on the import path can be written.** :func:`unsealed` checks, before any
  test, that no directory on ``sys.path`` (the standard library's, and the grader's own
  directory with the hidden tests, which the host sealed: owned by root, mode 0750, files
  0640, read by this process through its group) can be written by this process, by a
  group or by others, or is owned by anyone but root; nor can any directory above them
  be written, unless it is sticky (``/tmp``: only an entry's owner can rename it). In a
  sandbox with users nothing of the grading run is root once the grader's files are
  sealed, so no process of the run can change them.
* **Every import happens before the project's code runs.** :func:`preload` imports what
  the grader could otherwise import lazily (its own modules, pytest's plugins and
  reporting, the codec machinery: every ``encodings`` module, ``stringprep`` and
  ``unicodedata``, which a source-encoding cookie pulls in while a traceback is
  formatted) and what the hidden tests import (found in their source); :class:`Imports`
  records any import after that, which a test of the boundary expects to be none but
  the project's proxies and the hidden tests' own helpers.
"""

from __future__ import annotations

import ast
import importlib
import os
import stat
import sys

#: modules the grader may need after the tests started, imported before they start
PRELOAD = (
    "apptest_browser",
    "apptest_services",
    "apptest_fullstack",
    "apptest_files",
    "base64",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "email.parser",
    "fractions",
    "hashlib",
    "http.client",
    "http.server",
    "inspect",
    "linecache",
    "pathlib",
    "pprint",
    "reprlib",
    "secrets",
    "shlex",
    "shutil",
    "sqlite3",
    "statistics",
    "stringprep",
    "struct",
    "tempfile",
    "textwrap",
    "tokenize",
    "traceback",
    "unicodedata",
    "urllib.error",
    "urllib.parse",
    "urllib.request",
    "uuid",
    "zlib",
    "cmd",
    "code",
    "codeop",
    "faulthandler",
    "pdb",
    "_pytest._argcomplete",
    "_pytest._code.code",
    "_pytest._io.saferepr",
    "_pytest.assertion.rewrite",
    "_pytest.assertion.truncate",
    "_pytest.assertion.util",
    "_pytest.config.compat",
    "_pytest.python_api",
)


def _problem(path: str, leaf: bool) -> str | None:
    """Why ``path`` (an existing directory or file) could be changed by a process of the
    grading run, or None. ``leaf``: an entry itself, not a directory above one."""
    try:
        st = os.stat(path)
    except OSError as e:
        return f"{path} cannot be checked ({e.strerror})"
    if not leaf and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:
        # a sticky directory above an entry (/tmp): anyone may add names to it, but only
        # an entry's owner (root, checked for the entry) or the directory's may rename one
        return None if st.st_uid == 0 else f"{path} is sticky but belongs to uid {st.st_uid}"
    if os.access(path, os.W_OK):
        return f"{path} is writable by the grader's own user"
    if st.st_uid != 0:
        return f"{path} belongs to uid {st.st_uid}, who may change its mode"
    if st.st_mode & 0o022:
        return f"{path} is writable by its group or by others (mode {oct(st.st_mode & 0o7777)})"
    return None


def unsealed(here: str, extra: tuple = ()) -> str | None:
    """Why the grader's import path (``sys.path``, ``here`` and ``extra``, every file in
    ``here`` and every directory above them) could be written by a process of the grading
    run, or None when it cannot."""
    checked: set = set()
    for entry in (*sys.path, here, *extra):
        path = os.path.abspath(entry or ".")
        while not os.path.exists(path):  # a missing entry: whoever may create it
            path = os.path.dirname(path)
        leaf = True
        while path not in checked:
            checked.add(path)
            problem = _problem(path, leaf)
            if problem:
                return problem
            if path == os.path.dirname(path):
                break
            path, leaf = os.path.dirname(path), False
    for top, dirs, files in os.walk(here):
        for name in dirs + files:
            problem = _problem(os.path.join(top, name), True)
            if problem:
                return problem
    return None


def _import(name: str) -> None:
    try:
        importlib.import_module(name)
    except Exception:
        pass  # not in this image (or not on this platform): nothing to import later either


def hidden_imports(sources: dict, project_names) -> list:
    """Absolute imports in the hidden tests' ``sources`` (path -> text) that name neither
    the project (proxies) nor the hidden tests' own helper modules."""
    own = {os.path.splitext(os.path.basename(p))[0] for p in sources}
    out: set = set()
    for text in sources.values():
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out.add(node.module)
    skip = set(project_names) | own
    return sorted(n for n in out if n.partition(".")[0] not in skip)


def preload(hidden_sources: dict, project_names) -> None:
    """Import, now, everything the grader may import later (see the module docstring)."""
    import encodings
    import pkgutil

    for info in pkgutil.iter_modules(encodings.__path__):
        _import("encodings." + info.name)
    from _pytest.config import builtin_plugins, essential_plugins

    for plugin in sorted(set(builtin_plugins) | set(essential_plugins)):
        _import(plugin if plugin.startswith("_pytest.") else "_pytest." + plugin)
    for name in PRELOAD:
        _import(name)
    for name in hidden_imports(hidden_sources, project_names):
        _import(name)


class Imports:
    """Records the modules imported once :meth:`watch` was called (an audit hook)."""

    def __init__(self) -> None:
        self.on = False
        self.seen: list = []

    def watch(self) -> None:
        self.on = True

    def event(self, event: str, args) -> None:
        if event == "import" and self.on and len(self.seen) < 1000:
            self.seen.append(str(args[0]))

    def late(self, hidden_dir: str, project_names) -> list:
        """The modules imported late that are neither the project's (proxies, no file)
        nor the hidden tests' own (in the sealed ``hidden_dir``)."""
        out = []
        for name in dict.fromkeys(self.seen):
            if name.partition(".")[0] in project_names:
                continue
            origin = getattr(sys.modules.get(name), "__file__", None) or ""
            if origin.startswith(hidden_dir + os.sep):
                continue
            out.append(name)
        return sorted(out)[:50]
