"""The grading boundary itself (``apptest`` proxies, the wire, the worker), on this machine.

The in-sandbox modules run here as plain processes: a spawner of worker processes for a
small project in a temporary directory, and the proxies in this process. What is checked
is what crosses: plain data rebuilt as genuine values, everything else as proxies that
are equal only to themselves, exceptions by name, callbacks, and a worker that dies.
"""

from __future__ import annotations

import datetime
import decimal
import os
import secrets
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

GRADER = Path(__file__).resolve().parents[3] / "envs" / "appgen" / "grader"

PROJECT = {
    "proj/__init__.py": "",
    "proj/errors.py": textwrap.dedent(
        """
        class ProjError(ValueError):
            def __init__(self, message, position):
                super().__init__(f"{message} at {position}")
                self.position = position

        class Sub(ProjError):
            pass
        """
    ),
    "proj/things.py": textwrap.dedent(
        """
        import collections, datetime, decimal, enum, os, pathlib
        from proj.errors import Sub

        Point = collections.namedtuple("Point", "x y")

        class Color(str, enum.Enum):
            RED = "red"

        class Always:
            def __eq__(self, other): return True
            def __hash__(self): return 0
            @property
            def __class__(self): return int

        class Box:
            def __init__(self, items): self.items = list(items)
            def __len__(self): return len(self.items)
            def __iter__(self): return iter(self.items)
            def __contains__(self, x): return x in self.items
            def __getitem__(self, i): return self.items[i]
            def __enter__(self): return self
            def __exit__(self, *exc): return True  # would swallow the caller's exceptions

        def plain():
            return {"i": 1, "f": 1.0, "b": True, "n": None, "t": (1, "a"), "s": {1, 2},
                    "by": b"\\x00\\xff", "p": Point(1, 2), "c": Color.RED,
                    "dt": datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.timezone.utc),
                    "d": datetime.date(2024, 5, 1), "dec": decimal.Decimal("1.50"),
                    "path": pathlib.Path("/tmp/x"), 3: [1, [2, [3]]]}

        def liar():
            return Always()

        def fail(position):
            raise Sub("bad", position)

        def call_twice(fn, x):
            return fn(fn(x))

        def exit_now():
            os._exit(3)

        def huge():
            return "x" * (40 << 20)
        """
    ),
}


@pytest.fixture(scope="module")
def apptest(tmp_path_factory):
    root = tmp_path_factory.mktemp("boundary")
    for rel, text in PROJECT.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    name = f"agentgym-test-{secrets.token_hex(6)}"
    spawner = subprocess.Popen(
        [
            sys.executable,
            "-I",
            str(GRADER / "apptest_worker.py"),
            name,
            str(root),
            "group",
            "30",
            "300",
        ],
        start_new_session=True,
    )
    sys.path.insert(0, str(GRADER))
    try:
        import apptest

        apptest.configure(name, ["proj"], timeout=20, kill=True)
        apptest.install()
        yield apptest
        apptest.end_scope()
    finally:
        sys.path.remove(str(GRADER))
        sys.meta_path[:] = [f for f in sys.meta_path if type(f).__module__ != "apptest"]
        for mod in [
            m for m in sys.modules if m.split(".")[0] in ("proj", "apptest", "apptest_wire")
        ]:
            del sys.modules[mod]
        os.killpg(spawner.pid, signal.SIGKILL)
        spawner.wait()


@pytest.fixture
def fresh(apptest):
    """A new worker for each test, as the grader gives each hidden test."""
    apptest.end_scope()
    yield apptest
    apptest.end_scope()


def test_plain_data_arrives_as_genuine_values(fresh):
    from proj import things

    got = things.plain()
    assert type(got) is dict and got["i"] == 1 and type(got["i"]) is int
    assert type(got["f"]) is float and got["b"] is True and got["n"] is None
    assert got["t"] == (1, "a") and got["s"] == {1, 2} and got["by"] == b"\x00\xff"
    assert got["p"] == (1, 2) and got["p"].y == 2 and type(got["c"]) is str
    assert got["c"] == "red" and got[3] == [1, [2, [3]]]
    assert got["dt"] == datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC)
    assert got["d"] == datetime.date(2024, 5, 1) and got["dec"] == decimal.Decimal("1.50")
    assert got["path"] == Path("/tmp/x")


def test_other_objects_are_proxies_that_cannot_lie(fresh):
    from proj import things

    liar = things.liar()
    assert isinstance(liar, fresh.ProjectObject) and not isinstance(liar, int)
    assert liar != 1 and liar != liar.__class__ and liar == liar
    with pytest.raises(TypeError):
        {liar}  # noqa: B018 - distinct proxies of "equal" objects must not count as distinct
    box = things.Box([1, 2, 3])
    assert len(box) == 3 and list(box) == [1, 2, 3] and 2 in box and box[1] == 2
    assert isinstance(box, things.Box) and not isinstance(box, things.Point)
    with pytest.raises(AssertionError), box:  # the project's __exit__ cannot swallow it
        raise AssertionError("kept")
    assert things.plain.__name__ == "plain"


def test_exceptions_cross_by_name_message_and_attributes(fresh):
    from proj import things
    from proj.errors import ProjError

    with pytest.raises(ProjError, match="bad at 4") as info:
        things.fail(4)
    assert isinstance(info.value, ValueError) and type(info.value).__name__ == "Sub"
    assert info.value.position == 4
    with pytest.raises(AttributeError):
        things.nothing_here  # noqa: B018


def test_functions_of_the_tests_are_called_back(fresh):
    from proj import things

    seen = []

    def double(x):
        seen.append(x)
        return x * 2

    assert things.call_twice(double, 3) == 12 and seen == [3, 6]
    nested = things.call_twice(lambda b: things.Box([b]), 1)  # calls back into the project
    assert nested.items[0].items == [1]


def test_objects_do_not_outlive_their_test_but_module_paths_do(apptest):
    from proj import things

    apptest.end_scope()
    box = things.Box([1])
    cls = things.Box
    apptest.end_scope()
    with pytest.raises(apptest.ProjectProcessError, match="earlier test"):
        len(box)
    assert len(cls([1, 2])) == 2  # looked up again in the new process


def test_a_dying_or_flooding_worker_fails_only_its_test(fresh):
    from proj import things

    with pytest.raises(fresh.ProjectProcessError, match="exceeds the limit"):
        things.huge()  # refused (never as an exception of the project); the process goes on
    assert things.plain()["i"] == 1
    with pytest.raises(fresh.ProjectProcessError, match="exited or was killed"):
        things.exit_now()
    with pytest.raises(fresh.ProjectProcessError, match="gone"):
        things.plain()
    fresh.end_scope()
    assert things.plain()["i"] == 1
