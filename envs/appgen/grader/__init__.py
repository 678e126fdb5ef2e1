"""The code that runs inside the grading sandbox (read as text by the host, never imported).

* :mod:`.apptest_wire`: framed JSON messages and the plain values that cross the boundary;
* :mod:`.apptest_worker`: the project's side, run as the project's user: the spawner and
  the worker processes that run the project's code;
* :mod:`.apptest`: the grader's side of the boundary, which hidden tests import: proxies
  of the project's modules and objects, mirrored exceptions, the import hook;
* :mod:`.apptest_runner`: the grader's process: pytest, outcomes, limits, the report;
* :mod:`.apptest_seal`: the grader's import path checked unwritable, every import made
  before the project's code runs;
* :mod:`.apptest_files`: directories and files the grader shares with the project, made
  and read without following what the project put there (symlinks, FIFOs, hard links);
* :mod:`.apptest_fullstack`: fixtures of full-stack tasks (the app as a running server,
  mock services, a browser page); :mod:`.apptest_services` the mock services and
  :mod:`.apptest_browser` the headless Chromium driven over the DevTools pipe.

They run with the sandbox's ``python3`` (standard library and pytest, Python 3.8+), not
with agentgym's interpreter; :func:`source` hands their text to
:mod:`agentgym.envs.appgen.grading`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

__all__ = ["GRADER_MODULES", "WORKER_MODULES", "source"]

#: modules the grader's process needs (in its private directory)
GRADER_MODULES = (
    "apptest.py",
    "apptest_browser.py",
    "apptest_files.py",
    "apptest_fullstack.py",
    "apptest_runner.py",
    "apptest_seal.py",
    "apptest_services.py",
    "apptest_wire.py",
)
#: modules the project's processes need (the spawner and its workers)
WORKER_MODULES = ("apptest_worker.py", "apptest_wire.py")


@cache
def source(name: str) -> bytes:
    """The text of the in-sandbox module ``name`` (a file name from the lists above)."""
    return (Path(__file__).parent / name).read_bytes()
