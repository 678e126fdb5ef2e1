"""``agentgym appgen check-task DIR``: prove that a task directory is sound before anyone trains on it.

Every grading runs in one sandbox (Docker by default), reused between checks. The checks,
each reported with what it found:

* **loads**: ``task.toml`` and the directory are valid (:func:`.taskset.load_task`).
* **hash stable**: the content hash is the same when computed twice and for a copy of
  the directory elsewhere (it depends on paths and bytes only).
* **files through apptest.files**: no hidden test opens, reads, writes or lists a path
  with plain ``open`` (or pathlib, ``os.listdir``, ``sqlite3.connect``, ``shutil``):
  paths the project can reach go through ``apptest.files``, which follows none of the
  project's symlinks, FIFOs or hard links (:mod:`.filelint`).
* **helpers decide no assertion**: no assertion of a hidden test calls one of the hidden
  tests' own helper modules with plain data (none of the test's fixtures): were that
  module ever the project's, project code would decide the assertion (:mod:`.helperlint`).
* **reference passes**: the reference solution passes every hidden test (the real
  grader, in the sandbox; failures are listed with their first lines).
* **scaffold fails**: the bare scaffold passes no hidden test.
* **visible tests pass**: the visible tests, run as the agent runs them
  (``python3 -m pytest tests`` in the project), pass on the reference.
* **visible within hidden**: on the scaffold and on partial projects (the first half of
  the oracle's files, and all but the last file), every visible test that fails has a
  failing hidden test among those ``[visible]`` names for it (or, without that table,
  some hidden test fails). This shows on those projects that the visible tests ask for
  nothing the hidden tests do not check; it cannot prove it for every project.
* **services start**: each ``[services.NAME]`` mock starts in the grading sandbox from
  its fixture and answers every route of it as the fixture says.
* **forgetting is caught** (staged tasks with ``forgetful/``): the reference with the
  forgetful files lays over it loses some requirement, and only requirements of stages
  before the last.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agentgym import DataError
from agentgym.envs.appgen.filelint import plain_file_access
from agentgym.envs.appgen.grading import GradeResult, grade
from agentgym.envs.appgen.helperlint import helper_verdicts
from agentgym.envs.appgen.taskset import (
    VISIBLE_TESTS_DIR,
    AppTask,
    content_hash,
    is_test_file,
    load_task,
    visible_test_ids,
)
from agentgym.sandbox import SandboxPool


@dataclass
class Check:
    """One check's outcome."""

    name: str
    ok: bool
    detail: str = ""


@dataclass
class CheckReport:
    """All checks of one task directory."""

    task: str
    checks: list[Check] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def to_dict(self) -> dict:
        return {
            "task": self.task,
            "ok": self.ok,
            "seconds": round(self.seconds, 1),
            "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in self.checks],
        }


_SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR) (\S+?)(?: - .*)?$")


def _grade(task: AppTask, files: dict[str, bytes], sb, *, details: bool = False) -> GradeResult:
    """:func:`grade` for check-task: what it grades is the task's own code (reference,
    scaffold, their prefixes), so ``--sandbox local`` (asked for by name) may grade it
    without the isolation an agent's project needs."""
    return grade(task, files, sb, details=details, unsafe_local_grading=sb.backend == "local")


def run_visible(task: AppTask, files: dict[str, bytes], pool: SandboxPool) -> dict[str, str]:
    """Outcomes of the visible tests (``file::test`` -> passed/failed) on ``files``, run
    as the agent runs them, in a sandbox of ``pool``."""
    with pool.sandbox() as sb:
        sb.write_files(files)
        res = sb.run(
            f"python3 -m pytest -q -rA -p no:cacheprovider {VISIBLE_TESTS_DIR}",
            timeout=float(task.limits.grade_timeout),
        )
    out: dict[str, str] = {}
    for line in res.stdout.splitlines():
        m = _SUMMARY.match(line.strip())
        if m:
            test_id = m.group(2).removeprefix(f"{VISIBLE_TESTS_DIR}/")
            out[test_id] = "passed" if m.group(1) == "PASSED" else "failed"
    return out


def _prefixes(task: AppTask) -> list[tuple[int, str, dict[str, bytes]]]:
    """The scaffold plus the first k reference files, for k = 0, half and all but one."""
    order = task.oracle_order
    picks = sorted({0, len(order) // 2, len(order) - 1})
    out = []
    for k in picks:
        files = task.initial_files()
        for p in order[:k]:
            files[p] = task.solution[p]
        out.append((k, f"scaffold + first {k} of {len(order)} files", files))
    return out


_PROBE = """
import json
import urllib.error
import urllib.request

ROUTES = json.loads({routes!r})


def test_every_route_answers(services):
    for name, routes in ROUTES.items():
        for route in routes:
            query = "&".join(f"{{k}}={{v}}" for k, v in (route.get("query") or {{}}).items())
            url = services[name].url + route["path"] + ("?" + query if query else "")
            method = route.get("method", "GET").upper()
            data = b"{{}}" if method in ("POST", "PUT", "PATCH") else None
            req = urllib.request.Request(url, data=data, method=method)
            try:
                with urllib.request.urlopen(req, timeout=5) as resp:
                    status = resp.status
            except urllib.error.HTTPError as e:
                status = e.code
            assert status == int(route.get("status", 200)), (name, route["path"], status)
"""


def _service_probe(task: AppTask, pool: SandboxPool) -> Check:
    routes = {}
    for svc in task.services:
        fixture = json.loads(task.hidden_tests[svc.fixture].decode("utf-8"))
        routes[svc.name] = list(fixture.get("routes", []))
    with tempfile.TemporaryDirectory(prefix="agentgym-probe-") as tmp:
        probe_dir = Path(tmp) / task.name
        shutil.copytree(task.path, probe_dir)
        for test in (probe_dir / "tests_hidden").rglob("test_*.py"):
            test.unlink()
        toml = probe_dir / "task.toml"  # [visible] names hidden tests the probe lacks
        toml.write_text(re.sub(r"(?ms)^\[visible\]\n.*?(?=^\[|\Z)", "", toml.read_text()))
        (probe_dir / "tests_hidden" / "test_services_probe.py").write_text(
            _PROBE.format(routes=json.dumps(routes))
        )
        probe = load_task(probe_dir)
        with pool.sandbox() as sb:
            result = _grade(probe, probe.reference_files(), sb, details=True)
    n = sum(len(r) for r in routes.values())
    if result.score == 1.0:
        return Check("services start", True, f"{len(routes)} service(s), {n} route(s) answered")
    return Check("services start", False, "; ".join([*result.errors, *result.details.values()]))


def check_task(
    path: str | Path, backend: str = "docker", progress: Callable[[str], None] = print
) -> CheckReport:
    """Run every check on the task directory ``path`` (see the module docstring)."""
    start = time.monotonic()
    report = CheckReport(task=Path(path).name)

    def add(check: Check) -> None:
        report.checks.append(check)
        progress(f"[check-task] {'ok  ' if check.ok else 'FAIL'} {check.name}: {check.detail}")

    try:
        task = load_task(path)
    except DataError as e:
        add(Check("loads", False, str(e)))
        report.seconds = time.monotonic() - start
        return report
    add(Check("loads", True, f"{task.task_id}, {task.num_hidden_tests} hidden test cases"))
    with tempfile.TemporaryDirectory(prefix="agentgym-hash-") as tmp:
        copy = Path(tmp) / task.name
        shutil.copytree(task.path, copy)
        hashes = {content_hash(task.path), content_hash(task.path), content_hash(copy)}
    add(Check("hash stable", len(hashes) == 1, task.content_hash[:12]))
    plain = plain_file_access(task)
    add(
        Check(
            "files through apptest.files",
            not plain,
            "; ".join(plain) or "no hidden test touches a path without it",
        )
    )
    verdicts = helper_verdicts(task)
    add(
        Check(
            "helpers decide no assertion",
            not verdicts,
            "; ".join(verdicts) or "no hidden helper gets plain data inside an assertion",
        )
    )

    limits = {"timeout": float(task.limits.grade_timeout), **task.limits.sandbox()}
    with SandboxPool(size=1, backend=backend, warm=1, **limits) as pool:
        with pool.sandbox() as sb:
            ref = _grade(task, task.reference_files(), sb, details=True)
        bad = [f"{t}: {ref.details.get(t, o)}" for t, o in ref.per_test.items() if o != "passed"]
        add(
            Check(
                "reference passes",
                ref.score == 1.0 and not ref.errors,
                f"{ref.passed}/{ref.total} in {ref.seconds:.1f}s"
                + ("; " + "; ".join(bad) if bad else "")
                + ("; " + "; ".join(ref.errors) if ref.errors else ""),
            )
        )
        with pool.sandbox() as sb:
            bare = _grade(task, task.initial_files(), sb)
        add(Check("scaffold fails", bare.passed == 0, f"{bare.passed}/{bare.total} pass"))

        visible = run_visible(task, task.reference_files(), pool)
        failing = sorted(t for t, o in visible.items() if o != "passed")
        add(
            Check(
                "visible tests pass",
                bool(visible) and not failing,
                f"{len(visible)} visible test(s)" + (f"; failing: {failing}" if failing else ""),
            )
        )
        add(_covered(task, pool, bare.per_test))
        if task.services:
            add(_service_probe(task, pool))
        if task.forgetful:
            add(_forgetting(task, pool))
    report.seconds = time.monotonic() - start
    return report


def _covered(task: AppTask, pool: SandboxPool, scaffold: dict[str, str]) -> Check:
    """Every visible test that fails on a partial solution has a failing hidden test that
    covers it (``scaffold``: the hidden outcomes of the bare scaffold, graded already)."""
    covers = dict(task.visible_covers)
    problems = []
    for k, label, files in _prefixes(task):
        vis = run_visible(task, files, pool)
        if k == 0:
            hidden = scaffold
        else:
            with pool.sandbox() as sb:
                hidden = _grade(task, files, sb).per_test
        failing_hidden = {t for t, o in hidden.items() if o != "passed"}
        for test_id, outcome in vis.items():
            if outcome == "passed":
                continue
            wanted = set(covers.get(test_id, ()))
            caught = failing_hidden & wanted if wanted else failing_hidden
            caught |= {t for t in failing_hidden if any(t.startswith(w + "[") for w in wanted)}
            if not caught:
                problems.append(f"{label}: {test_id} fails but no covering hidden test does")
    mode = "declared in [visible]" if covers else "any hidden test (no [visible] table)"
    undeclared = [t for t in _visible_ids(task) if t not in covers] if covers else []
    if undeclared:
        problems.append(f"visible tests missing from [visible]: {undeclared}")
    return Check("visible within hidden", not problems, "; ".join(problems) or f"covers {mode}")


def _visible_ids(task: AppTask) -> list[str]:
    return [
        t
        for rel, data in task.visible_tests.items()
        if is_test_file(rel)
        for t in visible_test_ids(data, rel)
    ]


def _forgetting(task: AppTask, pool: SandboxPool) -> Check:
    with pool.sandbox() as sb:
        result = _grade(task, {**task.reference_files(), **task.forgetful}, sb)
    lost = [n for n, r in result.requirements.items() if not r["met"]]
    last = max(1, len(task.stages))
    late = [n for n in lost if result.requirements[n]["stage"] >= last]
    ok = bool(lost) and not late
    detail = f"lost {lost}" + (f"; of the last stage: {late}" if late else "")
    return Check("forgetting is caught", ok, detail)
