"""apptest: how hidden tests reach the project under test, across a process boundary.

Runs in the grader's process inside the grading sandbox (Python 3.8+). The project's code
never runs here: every test gets a fresh worker process of the project's user (see
:mod:`apptest_worker`), and what the test does with the project happens there.

* ``import calc.evaluator`` (any top-level name of the project) gives a proxy module; its
  attributes, and everything they lead to, are proxies too: :class:`ProjectObject`.
  Calling one, reading or setting an attribute, indexing, ``len``, ``bool``, ``str``,
  iteration, ``in``, ``with``, ``isinstance(x, ProjectClass)`` run in the worker.
* What comes back is either plain data, rebuilt here from the wire (numbers, strings,
  bytes, lists, tuples, named tuples, dicts, sets, None, booleans, dates, decimals,
  paths), or a proxy. A proxy is equal only to itself and is an instance of nothing but
  :class:`ProjectObject`, so ``result == 5`` and ``isinstance(result, int)`` are decided
  here, never by the project's code.
* An exception raised in the worker arrives as its class name, message and arguments: a
  built-in exception class (``ValueError``, ``KeyError``...) as itself, a project's class
  as a mirror class built here by name (subclass of its mirrored bases, or of
  :class:`ProjectError`), so ``pytest.raises(CalcError)`` works. Its other attributes are
  read from the worker. ``SystemExit``, ``KeyboardInterrupt`` or pytest's own outcome
  exceptions raised by the project are mirrors too: they fail a test like any error.
* The tests' own functions (a fake clock, a factory) may be passed in: the worker calls
  them back, with plain data or proxies as arguments.
* ``apptest.subprocess`` and ``apptest.threading`` are those modules *in the worker*: a
  command started through them (``subprocess.run([sys.executable, "-m", "calc"], ...)``)
  runs as the project's user, never as the grader.
* ``apptest.files`` (:mod:`apptest_files`) reads and writes paths the project can reach
  without following its symlinks or blocking on its FIFOs: hidden tests use it, never
  plain ``open``, for files in ``tmp_path``, the project or the app's ``DATA_DIR``.

A worker that crashes, exits or hangs fails the current test with
:class:`ProjectProcessError`; the next test gets a new one. Proxies do not outlive their
test, except those reached from a module by attribute names (``calc.evaluator.Calc``),
which are looked up again in the next test's worker.
"""

from __future__ import annotations

import builtins
import importlib.abc
import importlib.machinery
import os
import signal
import socket
import sys
import time
import types

import apptest_files as files
import apptest_wire as wire

__all__ = [
    "PYTHON",
    "ProjectError",
    "ProjectObject",
    "ProjectProcessError",
    "files",
    "remote_module",
]

#: the interpreter the project's commands should run with
PYTHON = sys.executable
_settings: dict = {"socket": "", "names": frozenset(), "timeout": 30.0, "kill": False}
_current = None  # the _Process of the running test
_MAX_NESTING = 32
#: special attributes of a proxy that are read from the project's object
_FORWARDED = frozenset({"__name__", "__qualname__", "__doc__", "__wrapped__"})
_REAL_EXCEPTIONS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type)
    and issubclass(value, Exception)
    and name not in ("StopIteration", "StopAsyncIteration")
)


class ProjectProcessError(Exception):
    """The project's process crashed, exited, hung or could not be reached: the test fails."""


class ProjectObjectExpired(ProjectProcessError):
    """A proxy from an earlier test's process was used (objects do not outlive their test)."""


class _RemoteException:
    """Mixin of mirrored exceptions: the message is the project's, attributes are read there."""

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        ref = self.__dict__.get("_apptest_ref")
        if ref is None:
            raise AttributeError(name)
        return getattr(ref, name)

    def __str__(self) -> str:
        return str(self.__dict__.get("_apptest_message", ""))


class ProjectError(_RemoteException, Exception):
    """Base of mirrored project exceptions that have no built-in exception base."""


def configure(socket_name: str, names, timeout: float, kill: bool) -> None:
    """Set where the spawner listens, which top-level names are the project's, the longest
    wait for one answer, and whether the grader may kill workers itself (same user)."""
    _settings.update(socket=socket_name, names=frozenset(names), timeout=float(timeout), kill=kill)


def install() -> None:
    """Make ``import <project name>`` give proxy modules in this process."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def end_scope() -> None:
    """End the current test's worker; the next use of the project starts a fresh one."""
    global _current
    proc, _current = _current, None
    if proc is not None:
        proc.close()


def remote_module(name: str) -> ProjectModule:
    """A module of the project's process (``remote_module("subprocess")``), as a proxy."""
    return _module(name)


def _process() -> _Process:
    global _current
    if _current is None:
        _current = _Process()
    return _current


class _Process:
    """The connection to one worker process."""

    def __init__(self) -> None:
        self.sock = None
        self.pid = 0
        self.dead = ""
        self.depth = 0
        self.next_id = 0
        self.callbacks: dict = {}  # id -> the test's function
        self.callback_ids: dict = {}  # id(function) -> id
        try:
            self._start()
        except ProjectProcessError:
            pass  # recorded in self.dead: every request of this test fails at once

    def _start(self) -> None:
        # The first connection may race the spawner's start; once it answered, a refused
        # connection means it is gone (the project killed it): fail at once.
        patience = 0.0 if _settings.get("reached") else max(10.0, _settings["timeout"])
        deadline = time.monotonic() + patience
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect("\0" + _settings["socket"])
                break
            except OSError as e:
                s.close()
                if time.monotonic() >= deadline:
                    self._fail("could not be started (%s)" % (e.strerror or e))
                time.sleep(0.01)
        _settings["reached"] = True
        self.sock = s
        try:
            wire.send(s, {"op": "spawn"})
            hello = wire.recv(s, time.monotonic() + max(10.0, _settings["timeout"]))
            self.pid = int(hello["hello"])
            if hello.get("pinned") is not True:
                _settings["unpinned"] = True
        except (wire.WireError, KeyError, TypeError, ValueError):
            self._fail("did not start")

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if _settings["kill"] and self.pid > 1:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
        elif self.dead:
            _sweep()

    def _fail(self, what: str, op: str = ""):
        self.dead = self.dead or what
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        during = f" while running {op}" if op else ""
        raise ProjectProcessError(f"the project's process {what}{during}") from None

    def request(self, op: str, **fields) -> dict:
        """Send one request; serve the worker's callbacks until its reply comes."""
        if self.dead:
            raise ProjectProcessError(f"the project's process is gone (it {self.dead})")
        if self.depth >= _MAX_NESTING:
            raise ProjectProcessError("calls between the tests and the project nest too deeply")
        self.next_id += 1
        rid = self.next_id
        fields.update(id=rid, op=op)
        self.depth += 1
        try:
            wire.send(self.sock, fields)
            while True:
                msg = wire.recv(self.sock, time.monotonic() + _settings["timeout"])
                if not isinstance(msg, dict):
                    raise wire.WireError("malformed message")
                if "re" in msg:
                    if msg["re"] != rid:
                        raise wire.WireError("a reply came out of order")
                    return msg
                if msg.get("op") != "callback":
                    raise wire.WireError("unexpected message")
                self._serve_callback(msg)
        except wire.WireTimeout:
            self._fail("did not answer within {:g}s".format(_settings["timeout"]), op)
        except wire.WireError as e:
            closed = "closed the connection" in str(e)
            self._fail("exited or was killed" if closed else f"failed ({e})", op)
        except BaseException:  # a test timeout while waiting: the worker is mid-call
            self.dead = self.dead or "was interrupted"
            raise
        finally:
            self.depth -= 1

    def callback_id(self, fn) -> int:
        key = id(fn)
        if key not in self.callback_ids:
            self.callback_ids[key] = len(self.callbacks) + 1
            self.callbacks[len(self.callbacks) + 1] = fn
        return self.callback_ids[key]

    def _serve_callback(self, msg: dict) -> None:
        try:
            fn = self.callbacks[int(msg["cb"])]
            args = decode(msg.get("args", []), self)
            kwargs = decode(msg.get("kwargs", {"t": "d", "v": []}), self)
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise TypeError("malformed callback arguments")
            reply = {"re": msg.get("id"), "ok": encode(fn(*args, **kwargs), self)}
        except Exception as e:
            # an assertion's message could hold expected values: only its class crosses
            cls = type(e)
            safe = cls.__module__ == "builtins" and not isinstance(e, AssertionError)
            reply = {
                "re": msg.get("id"),
                "exc": {
                    "c": {"m": cls.__module__, "q": cls.__qualname__},
                    "msg": str(e)[:500] if safe else "",
                },
            }
        wire.send(self.sock, reply)


def _sweep() -> None:
    """Ask the spawner to end what is left of earlier workers (best effort)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(5)
        s.connect("\0" + _settings["socket"])
        wire.send(s, {"op": "sweep"})
        wire.recv(s, time.monotonic() + 5)
    except (OSError, wire.WireError):
        pass
    finally:
        s.close()


# ------------------------------------------------------------------------- values


def encode(value, proc: _Process):
    """A value of the tests as wire data for ``proc``'s worker."""
    return wire.encode(value, lambda v, depth: _encode_other(v, proc))


def _encode_other(v, proc: _Process):
    if isinstance(v, ProjectObject):
        return {"t": "r", "v": v._handle_in(proc)}
    if isinstance(v, ProjectModule):
        return {"t": "mod", "v": v.__name__}
    if isinstance(v, type):
        key = _MIRROR_KEYS.get(v)
        if key is not None:
            return {"t": "path", "m": key[0], "q": key[1]}
        if v.__module__ == "builtins":
            return {"t": "bi", "v": v.__name__}
    if isinstance(v, _RemoteException) and isinstance(
        v.__dict__.get("_apptest_ref"), ProjectObject
    ):
        return {"t": "r", "v": v.__dict__["_apptest_ref"]._handle_in(proc)}
    if callable(v):
        return {
            "t": "cb",
            "v": proc.callback_id(v),
            "n": str(getattr(v, "__name__", "callback")),
            "q": str(getattr(v, "__qualname__", "callback")),
            "d": v.__doc__ if isinstance(getattr(v, "__doc__", None), str) else None,
            "m": str(getattr(v, "__module__", "apptest")),
        }
    raise TypeError(
        f"a {type(v).__name__} cannot be passed to the project's process: pass plain data (numbers, strings, "
        "lists, dicts...), objects that came from the project, or functions"
    )


def decode(data, proc: _Process, path=None):
    """Wire data from ``proc``'s worker as a value here; a top-level object proxy gets
    ``path`` (module, attribute names) so that later tests can look it up again."""
    if isinstance(data, dict) and data.get("t") == "r":
        return ProjectObject(proc, data, path)
    return wire.decode(data, lambda d, depth: _decode_other(d, proc))


def _decode_other(data: dict, proc: _Process):
    tag = data.get("t")
    if tag == "r":
        return ProjectObject(proc, data, None)
    if tag == "mod":
        return _module(str(data.get("v")))
    if tag == "xc":
        return _mirror(data.get("c") or {})
    raise wire.WireError(f"unknown value tag {tag!r}")


def _result(msg: dict, proc: _Process, op: str, path=None):
    if "fail" in msg:  # the operation ran, its result could not cross: never an exception
        raise ProjectProcessError("the project's process {}".format(str(msg["fail"])[:500]))
    if "ok" in msg:
        try:
            return decode(msg["ok"], proc, path)
        except wire.WireError as e:
            proc._fail(f"sent a malformed value ({e})", op)
    raise _exception(msg.get("exc"), proc, op)


def _exception(info, proc: _Process, op: str) -> BaseException:
    """The worker's exception as one raised here (a built-in class, or a mirror)."""
    if not isinstance(info, dict) or not isinstance(info.get("c"), dict):
        return ProjectProcessError("the project's process sent a malformed error")
    cls_info = info["c"]
    message = str(info.get("msg", ""))[:4000]
    if op == "next" and cls_info.get("m") == "builtins" and cls_info.get("q") == "StopIteration":
        return StopIteration()
    cls = _mirror(cls_info)
    if not issubclass(cls, _RemoteException):  # a genuine built-in exception class
        try:
            args = wire.decode(info.get("args"), lambda d, depth: _decode_other(d, proc))
            return cls(*args) if isinstance(args, tuple) else cls(message)
        except Exception:  # odd arguments for the class
            try:
                return cls(message)
            except Exception:  # a class that needs more (UnicodeDecodeError): a mirror
                cls = _mirror({"m": "project", "q": cls.__name__, "b": []})
    exc = cls.__new__(cls)
    exc.args = (message,)
    exc.__dict__["_apptest_message"] = message
    if isinstance(info.get("r"), int):
        exc.__dict__["_apptest_ref"] = ProjectObject(proc, {"v": info["r"], "k": "exception"}, None)
    return exc


_MIRRORS: dict = {}
_MIRROR_KEYS: dict = {}


def _mirror(info: dict, depth: int = 0) -> type:
    """The class here that stands for the project's exception class ``info``."""
    module, qualname = str(info.get("m", "?"))[:200], str(info.get("q", "?"))[:200]
    if module == "builtins" and qualname in _REAL_EXCEPTIONS:
        return getattr(builtins, qualname)
    key = (module, qualname)
    if key in _MIRRORS:
        return _MIRRORS[key]
    bases: list = []
    if depth < 16 and isinstance(info.get("b"), list):
        for b in info["b"][:8]:
            if isinstance(b, dict):
                m = _mirror(b, depth + 1)
                if m not in bases:
                    bases.append(m)
    bases = [b for b in bases if not any(o is not b and issubclass(o, b) for o in bases)]
    if not any(issubclass(b, _RemoteException) for b in bases):
        bases.insert(0, ProjectError if not bases else _RemoteException)
    name = qualname.rpartition(".")[2]
    name = name if name.isidentifier() else "ProjectException"
    try:
        cls = type(name, tuple(bases), {"__module__": module, "__qualname__": qualname})
    except TypeError:  # bases whose layouts cannot be combined
        cls = type(name, (ProjectError,), {"__module__": module, "__qualname__": qualname})
    if len(_MIRRORS) < 5000:
        _MIRRORS[key] = cls
        _MIRROR_KEYS[cls] = key
    return cls


# ------------------------------------------------------------------------- proxies


class ProjectObject:
    """An object that lives in the project's process; operations on it run there.

    Equal only to itself, unhashable, and never an instance of a type of this process,
    whatever the object claims there.
    """

    __slots__ = ("__weakref__", "_h", "_k", "_p", "_path")

    def __init__(self, proc: _Process, data: dict, path) -> None:
        object.__setattr__(self, "_p", proc)
        object.__setattr__(self, "_h", int(data.get("v", 0)))
        object.__setattr__(self, "_k", str(data.get("k", "?"))[:200])
        object.__setattr__(self, "_path", path)

    def _handle_in(self, proc: _Process) -> int:
        if self._p is proc:
            return self._h
        if self._path is None:
            raise ProjectObjectExpired(
                f"an object of the project ({self._k}) from an earlier test's process was used; "
                "objects do not outlive the test that made them"
            )
        module, attrs = self._path
        msg = proc.request("resolve", module=module, attrs=list(attrs))
        value = _result(msg, proc, "resolve")
        if not isinstance(value, ProjectObject):
            raise ProjectObjectExpired(f"{self._k} is no longer an object of the project")
        object.__setattr__(self, "_p", proc)
        object.__setattr__(self, "_h", value._h)
        return value._h

    def _op(self, op: str, attr: str | None = None, **fields):
        proc = _process()
        fields["obj"] = {"t": "r", "v": self._handle_in(proc)}
        path = None
        if attr is not None:
            fields["name"] = attr
            if self._path is not None:
                path = (self._path[0], (*tuple(self._path[1]), attr))
        return _result(proc.request(op, **fields), proc, op, path)

    def __getattribute__(self, name: str):
        if name in _FORWARDED:  # the project object's own, not this proxy class's
            return object.__getattribute__(self, "_op")("getattr", name)
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._op("getattr", name)

    def __setattr__(self, name: str, value) -> None:
        self._op("setattr", name, value=encode(value, _process()))

    def __delattr__(self, name: str) -> None:
        self._op("delattr", name)

    def __call__(self, *args, **kwargs):
        proc = _process()
        return self._op("call", args=encode(list(args), proc), kwargs=encode(kwargs, proc))

    def __getitem__(self, key):
        return self._op("getitem", key=encode(key, _process()))

    def __setitem__(self, key, value) -> None:
        proc = _process()
        self._op("setitem", key=encode(key, proc), value=encode(value, proc))

    def __delitem__(self, key) -> None:
        self._op("delitem", key=encode(key, _process()))

    def __len__(self) -> int:
        return _typed(self._op("len"), int, "len()")

    def __bool__(self) -> bool:
        return _typed(self._op("bool"), bool, "bool()")

    def __str__(self) -> str:
        return _typed(self._op("str"), str, "str()")

    def __contains__(self, item) -> bool:
        return _typed(self._op("contains", item=encode(item, _process())), bool, "in")

    def __iter__(self):
        return self._op("iter")

    def __next__(self):
        return self._op("next")

    def __enter__(self):
        return self._op("enter")

    def __exit__(self, exc_type, exc, tb) -> bool:
        sent = None
        if exc_type is not None:  # the class only: an assertion's message stays here
            builtin = exc_type.__module__ == "builtins" and exc_type.__name__ in _REAL_EXCEPTIONS
            sent = {"t": "bi", "v": exc_type.__name__ if builtin else "Exception"}
        self._op("exit", exc=sent)
        return False  # the project never swallows the tests' exceptions

    def __instancecheck__(self, obj) -> bool:
        return _typed(self._op("isinstance", item=encode(obj, _process())), bool, "isinstance")

    def __subclasscheck__(self, cls) -> bool:
        return _typed(self._op("issubclass", item=encode(cls, _process())), bool, "issubclass")

    def __repr__(self) -> str:
        return f"<project object {self._k}>"

    # equal only to itself, and unhashable: a set or dict of proxies would count distinct
    # proxies of objects that claim to be equal as distinct, which no plain value does
    __hash__ = None  # type: ignore[assignment]
    __eq__ = object.__eq__
    __ne__ = object.__ne__


def _typed(value, kind: type, what: str):
    if type(value) is not kind:
        raise TypeError(
            f"the project's {what} gave a {type(value).__name__}, not a {kind.__name__}"
        )
    return value


class ProjectModule(types.ModuleType):
    """A module of the project's process; its attributes are read there."""

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        proc = _process()
        msg = proc.request("getattr", obj={"t": "mod", "v": self.__name__}, name=name)
        return _result(msg, proc, "getattr", (self.__name__, (name,)))

    def __repr__(self) -> str:
        return f"<project module {self.__name__!r}>"


_MODULES: dict = {}


def _module(name: str) -> ProjectModule:
    mod = _MODULES.get(name)
    if mod is None:
        mod = _MODULES[name] = ProjectModule(name)
        mod.__path__ = []
    return mod


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return _module(spec.name)

    def exec_module(self, module) -> None:
        proc = _process()
        msg = proc.request("import", name=module.__name__)
        if "exc" in msg:
            raise _exception(msg["exc"], proc, "import")


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] not in _settings["names"]:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)


#: ``subprocess`` and ``threading`` of the project's process
subprocess = remote_module("subprocess")
threading = remote_module("threading")
