"""The attack suite: every known way to talk AppGen's grader into a pass, on real Docker.

The attacks are in :mod:`.attacks` (in-process subversion of the runner, objects that lie,
reaching the grader's files and processes, exhausting resources, the file-based tricks).
Each is graded on one task of every family of built-in tasks (how their hidden tests
reach the project: library calls with callbacks, an interpreter with a CLI, a SQLite
service with reports and a CLI, an HTTP server, binary files the tests corrupt, a
full-stack app that the tests start as a server and use in a browser) and must
score no more than the honest project it was built on: no hidden test may pass that the
honest project fails. The issue's own attack runs on every built-in task.

To keep hangs cheap the library tasks are graded with ``test_timeout = 2`` (the honest
projects pass well within it; the full-stack task keeps its own limits, as starting Chromium
takes longer, but its page waits last 1 s, not 10: no project graded here serves its page,
so the page tests fail either way), and the costly attacks (a stalled process costs each
test its whole time limit, an exhausted resource seconds, whatever the task) run on two
families; the stalling ones (:data:`STALLS`: waiting, not work) are graded side by side. Also here: what the project's process can find of the hidden tests at grading
time, and what an agent's ``<run>`` commands can find during the episode.

The attacks of issue 30 (:mod:`.attacks_paths`) each score 0, and why each is closed:

* **the chain** (a FIFO that becomes a symlink into the grader's directory between the
  hidden test's read and its write, a ``stringprep.py`` and an ``idna`` cookie written
  there): 1.0 on an empty ``kv_wal`` with the grader of issue 24. Closed twice over:
  ``apptest.files`` refuses the FIFO (``O_NONBLOCK`` open, ``fstat``: not a regular file);
  and with the task's old hidden tests (plain ``open``) the trap runs to its end but the
  grader, an unprivileged uid, cannot write the sealed directory (root's, 0750/0640).
  Had a write landed, the hidden tests' directory comes after the standard library on
  ``sys.path``, ``stringprep`` is imported before any test, and the hashes checked
  before the report would void the run.
* **path traps** on every task whose hidden tests touch files: the same, at every path
  the tests hand over; a FIFO never blocks the grader (the run ends within its limits).
* **writes aimed at the grader's import path**: nothing on the grader's ``sys.path`` is
  writable by any process of the run (its own check before any test), so the modules
  land only where nothing imports them; no import happens late (``late_imports``).
* **encoding cookies**: the codec machinery (every ``encodings`` module, ``stringprep``,
  ``unicodedata``) is imported before the project runs, from the read-only standard
  library: a cookie read later imports nothing (``late_imports`` stays empty).
* **the local backend without the opt-in**: it grades nothing (``ConfigError``), in
  ``test_local_opt_in.py``, which needs no engine.
"""

from __future__ import annotations

import json
import re
import shutil
from functools import cache

import gymnasium as gym
import pytest

from agentgym.envs.appgen.grading import GradeResult, grade
from agentgym.envs.appgen.taskset import BUILTIN_TASKS_DIR, AppTask, load_task, load_tasks

from .attacks import ATTACKS, ISSUE_24, PROBE, Attack, inject
from .attacks_paths import IMPORT_PATH_WRITES, chain, cookie_project, trap_project
from .conftest import need_docker, sandbox_kwargs

pytestmark = pytest.mark.docker

#: one task per family, and how many reference files make its honest partial project
FAMILIES = {
    "library": ("rate_limiter", 2),
    "interpreter-cli": ("expr_calc", 4),
    "sqlite-service": ("inventory", 3),
    "http-server": ("url_shortener", 2),
    "binary-files": ("kv_wal", 2),
    "full-stack": ("guestbook", 3),
}
#: the families that costly attacks run on (every family runs all the others)
COSTLY_FAMILIES = ("library", "http-server")
#: the tasks whose hidden tests read or write files the project can reach (what
#: check-task's lint found in them before issue 30 moved them to apptest.files)
FILE_TASKS = (
    "bank_ledger",
    "csv_report",
    "kv_wal",
    "log_analyzer",
    "markdown_html",
    "text_adventure",
    "todo_sqlite",
)
_TASK_DIRS: dict[str, object] = {}
#: the full-stack task's page waits (10 s by default): the projects graded here serve no
#: page (the partial one has no static files), so each page test that waits waits this long
PAGE_WAIT = 1


@pytest.fixture(scope="module", autouse=True)
def _docker(tmp_path_factory):
    need_docker()
    root = tmp_path_factory.mktemp("fast-tasks")
    for name in {n for n, _ in FAMILIES.values()} | set(FILE_TASKS):
        dest = root / name
        shutil.copytree(BUILTIN_TASKS_DIR / name, dest)
        _TASK_DIRS[name] = dest
        toml = dest / "task.toml"
        if load_task(dest).app is not None:  # no project here serves a page: its tests fail
            text = toml.read_text().replace("[app]\n", f"[app]\npage_timeout = {PAGE_WAIT}\n")
            toml.write_text(text)
            assert load_task(dest).app.page_timeout == PAGE_WAIT
            continue
        text = re.sub(r"test_timeout = \d+", "test_timeout = 2", toml.read_text())
        toml.write_text(re.sub(r"grade_timeout = \d+", "grade_timeout = 100", text))


class Pools:
    """One warm sandbox for library tasks (default limits) and one for full-stack tasks
    (their own memory and process limits: Chromium and the app's server share them)."""

    def __init__(self, library, fullstack) -> None:
        self.library = library
        self.fullstack = fullstack

    def sandbox_for(self, task: AppTask):
        return (self.library if task.app is None else self.fullstack).sandbox()


@pytest.fixture(scope="module")
def pool():
    from agentgym.sandbox import SandboxPool

    full = fast_task("full-stack").limits
    with (
        SandboxPool(size=1, backend="docker", warm=1, timeout=120) as library,
        SandboxPool(size=1, backend="docker", timeout=240, **full.sandbox()) as fullstack,
    ):
        yield Pools(library, fullstack)


def fast_task(family: str) -> AppTask:
    return load_task(_TASK_DIRS[FAMILIES[family][0]])


def fast(name: str) -> AppTask:
    return load_task(_TASK_DIRS[name])


def base_files(family: str, base: str) -> dict[str, bytes]:
    task = fast_task(family)
    files = task.initial_files()
    if base == "partial":
        for path in task.oracle_order[: FAMILIES[family][1]]:
            files[path] = task.solution[path]
    return files


def run_grade(pool: Pools, task: AppTask, files: dict[str, bytes]) -> GradeResult:
    with pool.sandbox_for(task) as sb:
        return grade(task, files, sb)


@cache
def _honest(family: str, base: str, pool) -> GradeResult:
    result = run_grade(pool, fast_task(family), base_files(family, base))
    assert not result.tampered and not result.timed_out, result
    if base == "partial":
        assert 0 < result.passed < result.total, (family, result)
    return result


def passed_tests(result: GradeResult) -> set[str]:
    return {t for t, outcome in result.per_test.items() if outcome == "passed"}


#: families whose gradings start Chromium (10 to 40 s each here): their cases are ``slow``,
#: and on one worker under --dist loadgroup, which grades their honest projects (~12 s
#: each) and starts their sandbox once instead of once per worker
SLOW_FAMILIES = ("full-stack",)
SLOW_CASES = [pytest.mark.slow, pytest.mark.xdist_group("appgen_attacks_slow")]
#: costly attacks whose cost is waiting, not work: the project's process stalls, and each
#: hidden test waits out its time limit (~20 s a grading, no CPU). Their gradings run side
#: by side, each in a sandbox of its own, from the first of their cases on one worker.
STALLS = ("signal handlers and timers", "hang at import", "modules the runner uses patched")
STALL_CASES = [pytest.mark.xdist_group("appgen_attack_stalls")]


def _marks(family: str, attack: Attack) -> list:
    if family in SLOW_FAMILIES:
        return SLOW_CASES
    return STALL_CASES if attack.name in STALLS else []


CASES = [
    pytest.param(family, attack, id=f"{family}-{attack.name}", marks=_marks(family, attack))
    for attack in ATTACKS
    for family in FAMILIES
    if not attack.costly or family in COSTLY_FAMILIES
]


def _rigged(family: str, attack: Attack) -> tuple[AppTask, dict[str, bytes]]:
    task = fast_task(family)
    return task, attack.build(task, base_files(family, attack.base))


@pytest.fixture(scope="module")
def stalls():
    """The stalling attacks' gradings, started together: (family, attack name) -> future."""
    from concurrent.futures import ThreadPoolExecutor

    from agentgym.sandbox import SandboxPool

    cases = [(f, a) for a in ATTACKS if a.name in STALLS for f in COSTLY_FAMILIES]
    assert len(cases) == 2 * len(STALLS)  # each name is an attack's, and a costly one

    def one(family: str, attack: Attack) -> GradeResult:
        task, rigged = _rigged(family, attack)
        with own.sandbox() as sb:
            return grade(task, rigged, sb)

    with (
        SandboxPool(size=len(cases), backend="docker", timeout=120) as own,
        ThreadPoolExecutor(len(cases)) as workers,
    ):
        yield {(f, a.name): workers.submit(one, f, a) for f, a in cases}


@pytest.mark.parametrize("family, attack", CASES)
def test_attack_scores_no_more_than_the_honest_project(request, pool, family: str, attack: Attack):
    honest = _honest(family, attack.base, pool)
    if attack.name in STALLS:
        result = request.getfixturevalue("stalls")[family, attack.name].result()
    else:
        result = run_grade(pool, *_rigged(family, attack))
    assert result.score <= honest.score, (attack.name, result.per_test, result.errors)
    assert passed_tests(result) <= passed_tests(honest), (attack.name, result.per_test)
    assert not result.timed_out, (attack.name, result.errors)


@pytest.mark.parametrize("task", load_tasks(), ids=lambda t: t.name)
def test_the_issue_24_attack_scores_zero_on_every_task(pool, task: AppTask):
    result = run_grade(pool, task, inject(ISSUE_24)(task, task.initial_files()))
    assert result.passed == 0, result.per_test
    assert not result.tampered


def _hidden_names(task: AppTask) -> set[str]:
    """Names of hidden test functions and files that nothing the agent sees contains."""
    seen = (
        "\n".join(data.decode("utf-8", "replace") for data in task.initial_files().values())
        + task.spec
    )
    names = {t.name.split("::")[-1] for t in task.expected_tests} | set(task.hidden_tests)
    return {n for n in names if n not in seen}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_projects_process_cannot_read_or_list_the_hidden_tests(pool, family: str):
    task = fast_task(family)
    files = inject(PROBE)(task, base_files(family, "partial"))
    with pool.sandbox_for(task) as sb:
        result = grade(task, files, sb)
        probe = sb.read_file("probe.json")
    found = json.loads(probe)
    assert found["listed"] and found["errors"] > 0  # it looked, and was refused somewhere
    text = json.dumps(found)
    leaked = sorted(n for n in _hidden_names(task) if n in text)
    assert leaked == [], leaked
    assert "secret" not in " ".join(found["environ"])
    assert result.passed <= _honest(family, "partial", pool).passed


@pytest.mark.parametrize("backend", ["docker", "local"])
def test_run_commands_cannot_find_the_hidden_tests_during_the_episode(backend):
    if backend == "local":
        from .conftest import LOCAL_PROBLEM

        if LOCAL_PROBLEM is not None:
            pytest.skip(LOCAL_PROBLEM)
    task = load_task(BUILTIN_TASKS_DIR / "rate_limiter")
    names = _hidden_names(task)
    pattern = "|".join(sorted(names))
    search = (
        "find / -xdev \\( -name tests_hidden -o -name 'test_ratelimit*' -o -name appgen \\) "
        "-print 2>/dev/null | head -20; "
        "python3 -c 'import site, sys; print(*site.getsitepackages(), *sys.path)' | "
        f"tr ' ' '\\n' | xargs -I{{}} grep -rlE '{pattern}' {{}} 2>/dev/null | head -20; "
        f"grep -rlE '{pattern}' /tmp /workspace /etc /var /opt /home /root 2>/dev/null | head; "
        "echo searched"
    )
    env = gym.make("agentgym/AppGen-v0", **sandbox_kwargs(backend), tasks=["rate_limiter"])
    try:
        env.reset(seed=0)
        obs, *_ = env.step(f'<run timeout="25">{search}</run>')
    finally:
        env.close()
    found = obs[-1].content.partition("--- stdout ---")[2]
    assert "searched" in found, obs[-1].content
    assert not [n for n in names if n in found], found
    assert not {"tests_hidden", "appgen", "agentgym"} & set(re.split(r"[/\s]", found)), found


# -- issue 30: paths the project shapes, the grader's import path ------------------------------


def _grade_and_look(pool: Pools, task: AppTask, files: dict[str, bytes]) -> tuple:
    """The grading, what the project's trap noted, and the listing of the grader's
    directory afterwards (as root: what the grading left there)."""
    with pool.sandbox_for(task) as sb:
        result = grade(task, files, sb, details=True)
        listing = sb.run(
            "ls -A /tmp/.agentgym-sealed/*/ /tmp/.agentgym-sealed/*/hidden", user="0:0"
        ).stdout
        notes = sb.run("cat /workspace/trap.log 2>/dev/null; true").stdout
    return result, notes, listing


def _legacy(task_dir) -> AppTask:
    """``kv_wal`` with its hidden tests as they were before issue 30: plain ``open`` on
    the project's ``wal.log`` (read, then write back)."""
    store = task_dir / "tests_hidden" / "test_store.py"
    text = store.read_text().replace(
        "data = files.read_bytes(log)", 'data = open(log, "rb").read()'
    )
    text = re.sub(r"files\.write_bytes\(log, (.*)\)", r'open(log, "wb").write(\1)', text)
    assert text.count('open(log, "wb")') == 2
    store.write_text(text)
    return load_task(task_dir)


@pytest.mark.parametrize("tests", ["apptest.files", "plain open"])
def test_the_chain_scores_zero(pool, tmp_path, tests: str):
    task = fast("kv_wal")
    if tests == "plain open":
        shutil.copytree(task.path, tmp_path / "kv_wal")
        task = _legacy(tmp_path / "kv_wal")
    result, notes, listing = _grade_and_look(pool, task, chain(task, task.initial_files()))
    assert result.score == 0 and not result.tampered and not result.timed_out, result
    assert "stringprep.py" not in listing and result.late_imports == [], (listing, result)
    torn = result.details["test_store.py::test_torn_tail_dropped"]
    if tests == "plain open":  # the trap ran to its end; the write through it failed: the
        # project cannot even name the sealed directory (issue 43), and it could not be
        # written if it could (test_grader_boundary.py)
        assert "swapped wal.log -> hidden/stringprep.py" in notes, notes
        assert "swapped wal.log -> hidden/test_store.py" in notes, notes
        assert "FileNotFoundError" in torn or "PermissionError" in torn, torn
    else:  # refused before anything was read: a FIFO is not a regular file
        assert "UnsafePath" in torn and "not a regular file" in torn, torn


@pytest.mark.parametrize("name", FILE_TASKS)
def test_path_traps_score_zero_on_every_task_that_touches_files(pool, name: str):
    task = fast(name)
    result, notes, listing = _grade_and_look(pool, task, trap_project(task, task.initial_files()))
    assert "armed" in notes, notes  # the tests handed the project paths, and it trapped them
    assert result.score == 0 and not result.tampered and not result.timed_out, result
    assert "stringprep.py" not in listing and result.late_imports == [], (listing, result)


@pytest.mark.parametrize(
    "family",
    [pytest.param(f, marks=[pytest.mark.slow] if f in SLOW_FAMILIES else []) for f in FAMILIES],
)
def test_writes_aimed_at_the_graders_import_path_score_zero(pool, family: str):
    task = fast_task(family)
    result, _, listing = _grade_and_look(
        pool, task, inject(IMPORT_PATH_WRITES)(task, task.initial_files())
    )
    assert result.score == 0 and not result.tampered and not result.timed_out, result
    planted = ("stringprep.py", "unicodedata.py", "pdb.py", "_winapi.py", "zz-agentgym.pth")
    assert not [n for n in planted if n in listing], listing
    assert result.late_imports == [], result.late_imports


@pytest.mark.parametrize(
    "family",
    [pytest.param(f, marks=[pytest.mark.slow] if f in SLOW_FAMILIES else []) for f in FAMILIES],
)
def test_encoding_cookie_triggers_score_zero(pool, family: str):
    task = fast_task(family)
    result, _, _ = _grade_and_look(pool, task, cookie_project(task, task.initial_files()))
    assert result.score == 0 and not result.tampered and not result.timed_out, result
    assert result.late_imports == [], result.late_imports
