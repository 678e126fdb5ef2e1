"""check-task flags a hidden helper that decides an assertion from plain data (issue 43)."""

from __future__ import annotations

import types

from agentgym.envs.appgen import load_tasks
from agentgym.envs.appgen.helperlint import helper_modules, helper_verdicts

HELPERS = {
    "verdicts.py": b"def is_even(n):\n    return n % 2 == 0\n",
    "kit/__init__.py": b"",
    "kit/shapes.py": b"def area(w, h):\n    return w * h\n",
}

HIDDEN = """\
import verdicts
import kit.shapes as shapes
from verdicts import is_even


def test_flagged(app):
    assert verdicts.is_even(3)                  # 7
    assert shapes.area(2, 3) == 6               # 8
    got = is_even(len(app.get("/x").json()))    # 9
    assert got


def test_not_flagged(app, page):
    assert verdicts.is_even(app)                # the fixture: the project never gets it
    assert kit.shapes.area(page, w=2) or True
    total = 2 + 2
    assert total == 4
"""


def test_helper_calls_with_plain_data_in_assertions_are_flagged():
    task = types.SimpleNamespace(
        hidden_tests={"test_x.py": HIDDEN.encode(), **HELPERS, "fixtures/a.json": b"{}"}
    )
    assert helper_modules(task) == {"verdicts", "kit"}
    found = helper_verdicts(task)
    assert [f.split(": ", 1)[0] for f in found] == ["test_x.py:7", "test_x.py:8", "test_x.py:9"]
    assert "compute it in the test module" in found[0]


def test_no_built_in_task_is_flagged():
    assert {t.name: helper_verdicts(t) for t in load_tasks() if helper_verdicts(t)} == {}
