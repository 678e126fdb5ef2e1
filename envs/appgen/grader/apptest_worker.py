"""The project's side of the grading boundary: a spawner, and the worker processes it forks.

Runs inside the grading sandbox as the project's user (the sandbox user), never as the
grader: ``python3 -I apptest_worker.py SOCKET PROJECT POLICY CPU_SECONDS LIFETIME``.

The **spawner** listens on the abstract Unix socket ``SOCKET`` (no file, so no permission
to get wrong; the sandbox has its own network namespace, so only its processes can
connect). Every connection asks for one thing with its first message:

* ``{"op": "spawn"}``: end what earlier workers left behind, then fork a fresh worker that
  serves this connection. One test, one worker: nothing a test's code did survives it.
* ``{"op": "sweep"}``: only end what earlier workers left behind.

"Ending" follows ``POLICY``: ``sweep`` kills every other process of this user (``kill(-1)``;
used when the grader runs as another user, so it cannot be hit), ``group`` kills the
process groups of earlier workers (used when grader and project share a user). Workers
get a CPU-time limit (``CPU_SECONDS``, inherited by what they start), an OOM score that
makes the kernel pick them before the grader, umask 0 (the grader's tests may read and
change the files they write), and /dev/null as standard streams. The spawner exits after
``LIFETIME`` seconds at the latest.

The OOM score is pinned: before any code of the project runs, the spawner puts itself
under a Landlock ruleset (:func:`pin_oom_score`) in which nothing under ``/proc`` can be
opened for writing, inherited by every process it starts and never lifted, so no worker
and nothing a worker starts can set its score back (an unprivileged process may lower
its own score to where it started, and without ``CAP_SYS_RESOURCE`` no floor can be set).
Where the kernel has no Landlock (before Linux 5.13) or the seccomp profile refuses it,
the workers say so in their first message and the grader reports it.

A **worker** imports the project's modules when the grader asks and runs operations on
its objects (attribute access, calls, items, iteration, ...), answering with plain data
(see :mod:`apptest_wire`) or with a handle for any other object, which stays here. The
grader's functions passed as arguments become stubs that call back across the wire.

Nothing here is trusted by the grader: the project's code runs in these processes and may
change anything in them. What they can do is answer with plain data, which the grader
rebuilds itself. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import builtins
import importlib
import os
import resource
import signal
import socket
import sys
import threading
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import apptest_wire as wire

del sys.path[0]

#: standard modules imported once in the spawner, so each worker starts with them loaded;
#: imported before the project's directory joins ``sys.path`` (a lazy import inside one of
#: them, such as mimetypes' ``_winapi``, must not find a project file of that name)
PRELOAD = (
    "argparse",
    "collections",
    "compileall",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "enum",
    "functools",
    "hashlib",
    "http.server",
    "itertools",
    "json",
    "math",
    "pathlib",
    "py_compile",
    "re",
    "sqlite3",
    "string",
    "struct",
    "subprocess",
    "threading",
    "typing",
    "urllib.parse",
    "zlib",
)
_BUILTIN_TYPES = {
    t.__name__: t for t in (int, float, str, bool, bytes, list, dict, tuple, set, frozenset)
}
_PLAIN_SUBCLASSES = (int, float, str, bytes, bytearray, tuple, list, dict, set, frozenset)


class Worker:
    """Serves one grader connection: runs the operations it asks for, keeps the objects."""

    #: whether the spawner pinned the OOM score of itself and every process it starts
    pinned = False

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.objects: dict = {}  # handle -> object
        self.handles: dict = {}  # id(object) -> handle (objects stay alive in self.objects)
        self.stubs: dict = {}  # callback id -> stub function
        self.next_id = 0
        self.thread = threading.get_ident()

    def serve(self) -> None:
        wire.send(self.conn, {"hello": os.getpid(), "pinned": self.pinned})
        while True:
            self.answer(wire.recv(self.conn))

    def answer(self, msg) -> None:
        """Carry out one request and send the reply: the result, the exception the
        operation raised, or ``fail`` when the result cannot be sent (too large, too deep:
        the grader never takes that for an exception of the project)."""
        rid = msg.get("id") if isinstance(msg, dict) else None
        try:
            value = self.dispatch(msg)
        except BaseException as e:  # every failure of the operation goes back
            reply = {"re": rid, "exc": self.describe_exception(e)}
        else:
            try:
                reply = {"re": rid, "ok": self.encode(value)}
            except Exception as e:
                reply = {
                    "re": rid,
                    "fail": f"its result could not be sent ({type(e).__name__}: {e})",
                }
        try:
            wire.send(self.conn, reply)
        except wire.MessageTooLarge as e:
            wire.send(self.conn, {"re": rid, "fail": f"its result could not be sent ({e})"})
        except wire.WireError:
            raise
        except Exception as e:  # the reply could not be serialised
            wire.send(self.conn, {"re": rid, "fail": f"its result could not be sent ({e})"})

    # -- operations -----------------------------------------------------------------------
    def dispatch(self, msg):
        op = msg["op"]
        if op == "import":
            return importlib.import_module(str(msg["name"]))
        if op == "resolve":
            obj = importlib.import_module(str(msg["module"]))
            for name in msg["attrs"]:
                obj = self.getattr(obj, str(name))
            return obj
        obj = self.decode(msg.get("obj"))
        if op == "getattr":
            return self.getattr(obj, str(msg["name"]))
        if op == "setattr":
            setattr(obj, str(msg["name"]), self.decode(msg["value"]))
            return None
        if op == "delattr":
            delattr(obj, str(msg["name"]))
            return None
        if op == "call":
            args = self.decode(msg.get("args", []))
            kwargs = self.decode(msg.get("kwargs", {"t": "d", "v": []}))
            return obj(*args, **kwargs)
        if op == "getitem":
            return obj[self.decode(msg["key"])]
        if op == "setitem":
            obj[self.decode(msg["key"])] = self.decode(msg["value"])
            return None
        if op == "delitem":
            del obj[self.decode(msg["key"])]
            return None
        if op == "len":
            return len(obj)
        if op == "bool":
            return bool(obj)
        if op == "str":
            return str(obj)
        if op == "contains":
            return self.decode(msg["item"]) in obj
        if op == "iter":
            return iter(obj)
        if op == "next":
            return next(obj)
        if op == "isinstance":
            return isinstance(self.decode(msg["item"]), obj)
        if op == "issubclass":
            return issubclass(self.decode(msg["item"]), obj)
        if op == "enter":
            return obj.__enter__()
        if op == "exit":
            exc = self.decode(msg.get("exc"))
            if isinstance(exc, type) and issubclass(exc, BaseException):
                obj.__exit__(exc, exc(), None)
            else:
                obj.__exit__(None, None, None)
            return None
        raise ValueError(f"unknown operation {op!r}")

    def getattr(self, obj, name: str):
        try:
            return getattr(obj, name)
        except AttributeError:
            if isinstance(obj, types.ModuleType):
                full = f"{obj.__name__}.{name}"
                try:
                    return importlib.import_module(full)
                except ModuleNotFoundError as e:
                    if e.name != full:
                        raise
            raise

    # -- values -----------------------------------------------------------------------------
    def handle(self, obj) -> int:
        h = self.handles.get(id(obj))
        if h is None or self.objects.get(h) is not obj:
            self.next_id += 1
            h = self.next_id
            self.objects[h] = obj
            self.handles[id(obj)] = h
        return h

    def encode(self, value):
        return wire.encode(value, self._encode_other)

    def _encode_other(self, v, depth: int):
        t = type(v)  # the real type: isinstance would believe a __class__ property
        if issubclass(t, types.ModuleType):
            return {"t": "mod", "v": str(v.__name__)}
        if issubclass(t, type) and issubclass(v, BaseException):
            return {"t": "xc", "v": self.handle(v), "c": describe_class(v)}
        if issubclass(t, tuple) and isinstance(getattr(t, "_fields", None), tuple):
            return wire.encode_named_tuple(v, self._encode_other, depth)
        if issubclass(t, _PLAIN_SUBCLASSES):  # an enum member, an OrderedDict, a str subclass
            return wire.encode(_plain(v), self._encode_other, depth)
        return {"t": "r", "v": self.handle(v), "k": type_name(v)}

    def decode(self, data):
        return wire.decode(data, self._decode_other)

    def _decode_other(self, data, depth: int):
        tag = data.get("t")
        if tag == "r":
            return self.objects[int(data["v"])]
        if tag == "mod":
            return importlib.import_module(str(data["v"]))
        if tag == "cb":
            return self.stub(data)
        if tag == "bi":
            name = str(data["v"])
            found = _BUILTIN_TYPES.get(name) or getattr(builtins, name, None)
            if isinstance(found, type):
                return found
        if tag == "path":
            obj = importlib.import_module(str(data["m"]))
            for part in str(data["q"]).split("."):
                obj = getattr(obj, part)
            return obj
        raise wire.WireError(f"unknown value tag {tag!r}")

    def describe_exception(self, e: BaseException) -> dict:
        try:
            message = str(e)
        except Exception:
            message = "<the exception's message could not be read>"
        out = {"c": describe_class(type(e)), "msg": message[:4000], "r": self.handle(e)}
        try:
            out["args"] = self.encode(tuple(e.args))
        except Exception:
            pass
        return out

    # -- callbacks to the grader ------------------------------------------------------------
    def stub(self, data) -> object:
        cb = int(data["v"])
        fn = self.stubs.get(cb)
        if fn is None:

            def fn(*args, **kwargs):
                return self.call_back(cb, args, kwargs)

            fn.__name__ = str(data.get("n") or "callback")
            fn.__qualname__ = str(data.get("q") or fn.__name__)
            fn.__doc__ = data.get("d") if isinstance(data.get("d"), str) else None
            fn.__module__ = str(data.get("m") or "apptest")
            self.stubs[cb] = fn
        return fn

    def call_back(self, cb: int, args: tuple, kwargs: dict):
        """Call the grader's function ``cb``; serve the grader's nested requests meanwhile."""
        if threading.get_ident() != self.thread:
            raise RuntimeError(
                "a function passed in by the tests can only be called from the thread "
                "that runs the tests' calls"
            )
        self.next_id += 1
        rid = -self.next_id
        wire.send(
            self.conn,
            {
                "id": rid,
                "op": "callback",
                "cb": cb,
                "args": self.encode(list(args)),
                "kwargs": self.encode(dict(kwargs)),
            },
        )
        while True:
            msg = wire.recv(self.conn)
            if isinstance(msg, dict) and "re" in msg:
                if msg["re"] != rid:
                    raise wire.WireError("a reply came out of order")
                if "ok" in msg:
                    return self.decode(msg["ok"])
                raise _grader_exception(msg.get("exc") or {})
            self.answer(msg)


def _plain(v):
    """The plain value inside an instance of a subclass of a plain type."""
    t = type(v)
    if issubclass(t, int):
        return int(int.__repr__(v))
    if issubclass(t, float):
        return float(float.__repr__(v))
    if issubclass(t, str):
        return str.__str__(v)
    if issubclass(t, (bytes, bytearray)):
        return bytes(v)
    if issubclass(t, tuple):
        return tuple(tuple.__iter__(v))
    if issubclass(t, list):
        return list(list.__iter__(v))
    if issubclass(t, dict):
        return dict(dict.items(v))
    if issubclass(t, frozenset):
        return frozenset(frozenset.__iter__(v))
    return set(set.__iter__(v))


def describe_class(cls, depth: int = 0) -> dict:
    """An exception class by module, qualified name and exception bases (for its mirror)."""
    out = {"m": str(getattr(cls, "__module__", "?")), "q": str(getattr(cls, "__qualname__", "?"))}
    if depth < 16:
        out["b"] = [
            describe_class(b, depth + 1)
            for b in cls.__bases__
            if isinstance(b, type) and issubclass(b, BaseException)
        ][:8]
    return out


def type_name(v) -> str:
    try:
        t = type(v)
        return (f"{t.__module__}.{t.__qualname__}")[:200]
    except Exception:
        return "?"


def _grader_exception(info: dict) -> BaseException:
    """What a grader function raised, as an exception the project's code can catch."""
    cls = info.get("c") or {}
    found = getattr(builtins, str(cls.get("q")), None) if cls.get("m") == "builtins" else None
    message = str(info.get("msg", ""))
    if isinstance(found, type) and issubclass(found, Exception):
        return found(message)
    return RuntimeError("{}: {}".format(cls.get("q", "error"), message))


# --------------------------------------------------------------------------------- spawner


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _alive_others() -> bool:
    """Whether a process of this user other than this one is alive (zombies aside)."""
    me, uid = os.getpid(), os.getuid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                status = f.read()
        except OSError:
            continue
        if "\nState:\tZ" not in status and f"\nUid:\t{uid}\t" in status:
            return True
    return False


def _sweep() -> None:
    """Kill every other process of this user (the spawner's own user; never the grader)."""
    for _ in range(100):
        try:
            os.kill(-1, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return
        _reap()
        if not _alive_others():
            return
        time.sleep(0.002)


def _kill_groups(groups: list) -> None:
    for pgid in groups:
        if pgid > 1:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
    del groups[:]
    _reap()


def pin_oom_score() -> bool:
    """Put this process (and all it will start) under a Landlock ruleset that refuses
    opening anything under ``/proc`` for writing, so no OOM score can be lowered again;
    whether that worked. Standard library only: the system calls through ``ctypes``."""
    import ctypes
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    write_file = 1 << 1  # LANDLOCK_ACCESS_FS_WRITE_FILE
    handled = struct.pack("=Q", write_file)
    ruleset = libc.syscall(444, handled, len(handled), 0)  # landlock_create_ruleset
    if ruleset < 0:
        return False
    try:
        for entry in os.listdir("/"):
            if entry == "proc":
                continue
            try:
                top = os.open("/" + entry, os.O_PATH | os.O_CLOEXEC | os.O_DIRECTORY)
            except OSError:
                continue
            try:  # landlock_add_rule(ruleset, LANDLOCK_RULE_PATH_BENEATH, ...)
                if libc.syscall(445, ruleset, 1, struct.pack("=Qi", write_file, top), 0):
                    return False
            finally:
                os.close(top)
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS (Docker sets it already)
        return libc.syscall(446, ruleset, 0) == 0  # landlock_restrict_self
    except OSError:
        return False
    finally:
        os.close(ruleset)


def _preload() -> None:
    """Import :data:`PRELOAD`, with nothing of the project on ``sys.path`` yet."""
    for mod in PRELOAD:
        try:
            importlib.import_module(mod)
        except Exception:
            pass


def _compile_project() -> None:
    """Compile the project's modules to bytecode (nothing of it runs), so that each
    worker's imports read the bytecode instead of compiling the source again."""
    import compileall

    try:
        compileall.compile_dir(".", quiet=2, workers=1)
    except Exception:
        pass  # a worker compiles what could not be compiled here, and reports its errors


def _quiet_streams() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)


def _become_worker(conn: socket.socket, cpu: int) -> None:
    os.setsid()
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    except (ValueError, OSError):
        pass
    try:
        Worker(conn).serve()
    except wire.WireError:
        pass


def main(argv: list) -> None:
    name, project, policy, cpu, lifetime = argv
    signal.alarm(max(1, int(float(lifetime))))
    _quiet_streams()
    os.umask(0)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    Worker.pinned = pin_oom_score()
    _preload()  # before the project's directory is on sys.path: only the standard library
    os.chdir(project)
    _compile_project()
    sys.path.append(os.getcwd())
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(16)
    groups: list = []
    while True:
        conn, _ = listener.accept()
        try:
            request = wire.recv(conn, time.monotonic() + 10)
        except wire.WireError:
            conn.close()
            continue
        if policy == "sweep":
            _sweep()
        else:
            _kill_groups(groups)
        if not isinstance(request, dict) or request.get("op") != "spawn":
            try:
                wire.send(conn, {"ok": True})
            except wire.WireError:
                pass
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            try:
                listener.close()
                signal.alarm(0)
                _become_worker(conn, int(cpu))
            finally:
                os._exit(0)
        groups.append(pid)
        conn.close()


if __name__ == "__main__":
    main(sys.argv[1:])
