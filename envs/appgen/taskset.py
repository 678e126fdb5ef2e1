"""AppGen tasks: loading task directories, validating them, hashing their content.

A task is a directory; authors add one without writing code::

    my_task/
      task.toml        title, difficulty, tags, [limits], [oracle] order
      spec.md          the natural-language specification the agent receives
      scaffold/        files the agent's workspace starts with (may be empty or absent)
      tests_visible/   example tests the agent can read and run (copied to tests/)
      tests_hidden/    the tests that decide the reward (never shown to the agent)
      solution/        the reference solution: files written on top of the scaffold
      stages/          staged tasks: the user's requests, one file per stage (optional)
      forgetful/       staged tasks: files of a solution that forgot the early stages'
                       preferences (optional; check-task proves the hidden tests notice)

``task.toml``::

    title = "Todo service with SQLite and a CLI"
    difficulty = "medium"            # easy | medium | hard
    tags = ["sqlite", "cli"]

    [limits]                         # all optional
    max_turns = 40                   # act turns before the episode is truncated
    command_timeout = 30             # seconds a <run> action may take at most
    grade_timeout = 150              # seconds for the whole hidden-test run
    test_timeout = 30                # seconds for one hidden test

    [oracle]
    order = ["todo/models.py", "todo/db.py"]   # the reference writes files in this order

Hidden tests run with the project directory as the working directory and the project on
``sys.path``; they import the agent's modules or run them as subprocesses. Each test
function counts once, a ``pytest.mark.parametrize`` test once per parameter set (its
values must be a literal list so that the count is known without running anything).

Full-stack tasks add ``[app]`` (the command that starts the server, ``PORT`` and
``DATA_DIR`` in its environment), ``[services.NAME]`` (mock external services from hidden
fixtures), ``[[stages]]`` (a spec that arrives over several conversations),
``[requirements.NAME]`` (what ``@pytest.mark.requirement("NAME")`` tests check, and the
stage that asked for it) and ``[visible]`` (which hidden tests cover each visible test);
``docs/envs/appgen-tasks.md`` documents every field.

The *content hash* is a SHA-256 over every file of the directory (paths and bytes); it
identifies the task version and is part of ``task_id``.
"""

from __future__ import annotations

import ast
import hashlib
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentgym import DataError, UnknownNameError
from agentgym.envs.appgen.taskextras import (
    AppSettings,
    Requirement,
    ServiceSpec,
    Stage,
    parse_extras,
)

#: Where the built-in tasks live (shipped as package data).
BUILTIN_TASKS_DIR = Path(__file__).resolve().parent / "tasks"
DIFFICULTIES = ("easy", "medium", "hard")
#: Directory in the agent's workspace that receives the visible tests.
VISIBLE_TESTS_DIR = "tests"
#: Files and directories that never count as task content.
_IGNORED_PARTS = {"__pycache__", ".pytest_cache", ".DS_Store"}
_DEFAULT_LIMITS = {
    "max_turns": 40,
    "command_timeout": 30,
    "grade_timeout": 150,
    "test_timeout": 30,
    "memory_mb": 512,
    "pids": 128,
}
#: ``[limits]`` keys that are sandbox limits (they apply to the episode and the grading)
SANDBOX_LIMIT_KEYS = ("memory_mb", "pids")
_MIN_SOLUTION_FILES = 3


@dataclass(frozen=True)
class ExpectedTest:
    """One hidden test function and how many test cases it yields.

    Attributes:
        file: the test file, relative to ``tests_hidden`` (``test_cli.py``).
        name: the test's name inside the file (``test_add`` or ``TestCli::test_add``).
        count: 1, or the number of parameter sets of a parametrized test.
    """

    file: str
    name: str
    count: int = 1
    requirements: tuple[str, ...] = ()

    @property
    def test_id(self) -> str:
        return f"{self.file}::{self.name}"


@dataclass(frozen=True)
class TaskLimits:
    """Per-task limits from ``task.toml`` ``[limits]``."""

    max_turns: int = _DEFAULT_LIMITS["max_turns"]
    command_timeout: float = _DEFAULT_LIMITS["command_timeout"]
    grade_timeout: float = _DEFAULT_LIMITS["grade_timeout"]
    test_timeout: float = _DEFAULT_LIMITS["test_timeout"]
    memory_mb: int = _DEFAULT_LIMITS["memory_mb"]
    pids: int = _DEFAULT_LIMITS["pids"]

    def sandbox(self) -> dict[str, Any]:
        """The sandbox limits this task asks for (``SandboxLimits`` fields)."""
        return {"memory_mb": int(self.memory_mb), "pids": int(self.pids)}


@dataclass(frozen=True)
class AppTask:
    """A loaded, validated task. Files are ``relative path -> bytes``.

    Attributes:
        name: the directory name, the task's stable name.
        content_hash: SHA-256 hex digest of the whole directory.
        hidden_tests: also holds non-test data files of ``tests_hidden`` (fixtures).
        expected_tests: the hidden test cases, found statically (see the module doc).
    """

    name: str
    path: Path
    title: str
    difficulty: str
    tags: tuple[str, ...]
    spec: str
    scaffold: dict[str, bytes]
    visible_tests: dict[str, bytes]
    hidden_tests: dict[str, bytes]
    solution: dict[str, bytes]
    limits: TaskLimits
    oracle_order: tuple[str, ...]
    content_hash: str
    expected_tests: tuple[ExpectedTest, ...] = field(default=())
    app: AppSettings | None = None
    services: tuple[ServiceSpec, ...] = ()
    stages: tuple[Stage, ...] = ()
    requirements: tuple[Requirement, ...] = ()
    visible_covers: tuple[tuple[str, tuple[str, ...]], ...] = ()
    forgetful: dict[str, bytes] = field(default_factory=dict)

    @property
    def staged(self) -> bool:
        return len(self.stages) > 1

    @property
    def task_id(self) -> str:
        """``name@hash12``: changes whenever any file of the task changes."""
        return f"{self.name}@{self.content_hash[:12]}"

    @property
    def num_hidden_tests(self) -> int:
        return sum(t.count for t in self.expected_tests)

    def initial_files(self) -> dict[str, bytes]:
        """The agent's workspace at the start: the scaffold plus the visible tests."""
        files = dict(self.scaffold)
        for rel, data in self.visible_tests.items():
            files[f"{VISIBLE_TESTS_DIR}/{rel}"] = data
        return files

    def reference_files(self) -> dict[str, bytes]:
        """The finished project: the initial workspace with the solution written over it."""
        return {**self.initial_files(), **self.solution}


def _read_tree(root: Path) -> dict[str, bytes]:
    if not root.is_dir():
        return {}
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and not (set(rel.parts) & _IGNORED_PARTS) and p.suffix != ".pyc":
            out[rel.as_posix()] = p.read_bytes()
    return out


def content_hash(task_dir: Path) -> str:
    """SHA-256 over the sorted (path, content) pairs of every file in ``task_dir``."""
    h = hashlib.sha256()
    for rel, data in _read_tree(task_dir).items():
        h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def _param_count(decorator: ast.expr, where: str) -> int | None:
    """Parameter sets of a ``pytest.mark.parametrize(names, values)`` decorator, else None."""
    if not isinstance(decorator, ast.Call):
        return None
    f = decorator.func
    if not (isinstance(f, ast.Attribute) and f.attr == "parametrize"):
        return None
    args = list(decorator.args)
    values = (
        args[1]
        if len(args) > 1
        else next((k.value for k in decorator.keywords if k.arg == "argvalues"), None)
    )
    if isinstance(values, ast.List | ast.Tuple):
        return len(values.elts)
    raise DataError(
        f"{where}: pytest.mark.parametrize needs a literal list of values in hidden tests "
        "(the number of test cases must be known without running them)."
    )


def _tests_in(source: bytes, file: str) -> list[ExpectedTest]:
    try:
        tree = ast.parse(source, filename=file)
    except SyntaxError as e:
        raise DataError(f"tests_hidden/{file}: not valid Python ({e}).") from e

    def count(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
        n = 1
        for dec in fn.decorator_list:
            k = _param_count(dec, f"tests_hidden/{file}:{fn.lineno}")
            if k is not None:
                n *= k
        return n

    def test(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str, outer=()) -> ExpectedTest:
        reqs = tuple(
            r for dec in [*outer, *fn.decorator_list] if (r := _requirement(dec)) is not None
        )
        return ExpectedTest(file, name, count(fn), reqs)

    found = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            found.append(test(node, node.name))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef) and sub.name.startswith(
                    "test"
                ):
                    found.append(test(sub, f"{node.name}::{sub.name}", node.decorator_list))
    return found


def visible_test_ids(source: bytes, file: str) -> list[str]:
    """Test ids of a visible test file (any parametrize allowed; unparsable: none)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            out.append(f"{file}::{node.name}")
    return out


def _requirement(decorator: ast.expr) -> str | None:
    """The name in a ``pytest.mark.requirement("NAME")`` decorator, else None."""
    if (
        isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Attribute)
        and decorator.func.attr == "requirement"
        and decorator.args
        and isinstance(decorator.args[0], ast.Constant)
        and isinstance(decorator.args[0].value, str)
    ):
        return decorator.args[0].value
    return None


def is_test_file(path: str) -> bool:
    """Whether pytest would collect ``path`` as a test module (``test_*.py``, ``*_test.py``)."""
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def load_task(task_dir: str | Path) -> AppTask:
    """Load and validate one task directory.

    Raises:
        DataError: a required file is missing or malformed; the message names it.
    """
    root = Path(task_dir).resolve()
    return _load_task_cached(root, content_hash(root) if root.is_dir() else "")


@lru_cache(maxsize=256)
def _load_task_cached(root: Path, digest: str) -> AppTask:
    if not root.is_dir():
        raise DataError(f"{root}: not a task directory (it does not exist).")
    name = root.name
    toml_path = root / "task.toml"
    spec_path = root / "spec.md"
    for required in (toml_path, spec_path):
        if not required.is_file():
            raise DataError(
                f"{required}: missing. A task directory needs task.toml, spec.md, "
                "tests_hidden/ and solution/ (see agentgym.envs.appgen.taskset)."
            )
    try:
        meta: dict[str, Any] = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise DataError(f"{toml_path}: invalid TOML ({e}).") from e
    difficulty = meta.get("difficulty", "medium")
    if difficulty not in DIFFICULTIES:
        raise DataError(
            f"{toml_path}: difficulty must be one of {DIFFICULTIES}, got {difficulty!r}."
        )
    raw_limits = dict(meta.get("limits", {}))
    unknown = set(raw_limits) - set(_DEFAULT_LIMITS)
    if unknown:
        raise DataError(
            f"{toml_path}: unknown [limits] key(s) {sorted(unknown)}; known: {sorted(_DEFAULT_LIMITS)}."
        )
    for key, value in raw_limits.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise DataError(f"{toml_path}: [limits] {key} must be a number > 0, got {value!r}.")
    limits = TaskLimits(**{**_DEFAULT_LIMITS, **raw_limits})

    hidden = _read_tree(root / "tests_hidden")
    expected: list[ExpectedTest] = []
    for rel, data in hidden.items():
        if is_test_file(rel):
            expected += _tests_in(data, rel)
    if not expected:
        raise DataError(
            f"{root / 'tests_hidden'}: no hidden tests (test_*.py with test functions)."
        )
    solution = _read_tree(root / "solution")
    if len(solution) < _MIN_SOLUTION_FILES:
        raise DataError(
            f"{root / 'solution'}: the reference solution must have at least "
            f"{_MIN_SOLUTION_FILES} files (it has {len(solution)})."
        )
    visible = _read_tree(root / "tests_visible")
    visible_ids = {
        t for rel, data in visible.items() if is_test_file(rel) for t in visible_test_ids(data, rel)
    }
    extras = parse_extras(root, meta, hidden, solution, expected, visible_ids)
    order = list(meta.get("oracle", {}).get("order", []))
    if extras["stages"]:
        order = [p for st in extras["stages"] for p in st.oracle] + order
    missing = [p for p in order if p not in solution]
    if missing:
        raise DataError(f"{toml_path}: [oracle] order names files not in solution/: {missing}.")
    order = list(dict.fromkeys(order))
    order += [p for p in sorted(solution) if p not in order]
    return AppTask(
        name=name,
        path=root,
        title=str(meta.get("title", name)),
        difficulty=difficulty,
        tags=tuple(meta.get("tags", ())),
        spec=spec_path.read_text(encoding="utf-8"),
        scaffold=_read_tree(root / "scaffold"),
        visible_tests=visible,
        hidden_tests=hidden,
        solution=solution,
        limits=limits,
        oracle_order=tuple(order),
        content_hash=digest,
        expected_tests=tuple(expected),
        forgetful=_read_tree(root / "forgetful"),
        **extras,
    )


def find_task_dirs(root: str | Path) -> list[Path]:
    """Task directories under ``root`` (or ``root`` itself when it is one), sorted by name."""
    root = Path(root)
    if (root / "task.toml").is_file():
        return [root]
    if not root.is_dir():
        raise DataError(f"{root}: no such task directory.")
    return sorted((p for p in root.iterdir() if (p / "task.toml").is_file()), key=lambda p: p.name)


def builtin_task_names() -> list[str]:
    """Names of the tasks that ship with agentgym, sorted."""
    return [p.name for p in find_task_dirs(BUILTIN_TASKS_DIR)]


#: entry-point group of installed task sets: ``NAME = "package.module"`` (a package whose
#: directory holds task directories), selected with ``tasks="@NAME"``
TASK_PLUGIN_GROUP = "agentgym.appgen_tasks"


def plugin_dir(name: str) -> Path:
    """The directory of the installed task set ``name`` (entry point in
    :data:`TASK_PLUGIN_GROUP`; its value names a package or module, or a callable that
    returns a path)."""
    from importlib.metadata import entry_points

    found = {ep.name: ep for ep in entry_points(group=TASK_PLUGIN_GROUP)}
    if name not in found:
        raise UnknownNameError(f"AppGen task set (entry point in {TASK_PLUGIN_GROUP})", name, found)
    target = found[name].load()
    if callable(target):
        target = target()
    if isinstance(target, str | Path):
        return Path(target)
    where = getattr(target, "__path__", None) or [Path(getattr(target, "__file__", "")).parent]
    return Path(next(iter(where)))


def _is_path(item: str) -> bool:
    return "/" in item or "\\" in item or item.startswith((".", "~"))


def resolve_sources(items: list[str] | tuple[str, ...]) -> tuple[list[str], list[Path]]:
    """Split ``tasks`` entries into task names and directories: a path (with a ``/`` or
    starting with ``.`` or ``~``) is a task directory or a directory of tasks, ``@NAME`` an
    installed task set, anything else a task name."""
    names: list[str] = []
    dirs: list[Path] = []
    for item in items:
        if not isinstance(item, str) or not item:
            raise DataError(f"AppGen tasks: {item!r} is not a task name, a path or @SET.")
        if item.startswith("@"):
            dirs.append(plugin_dir(item[1:]))
        elif _is_path(item):
            dirs.append(Path(item).expanduser())
        else:
            names.append(item)
    return names, dirs


def load_tasks(
    names: list[str] | tuple[str, ...] | str | None = None,
    task_dirs: list[str | Path] | tuple[str | Path, ...] = (),
) -> list[AppTask]:
    """Load tasks, sorted by name: the built-in ones, those under ``task_dirs``, and those
    ``names`` points at.

    Args:
        names: what to play (default: every built-in task and those of ``task_dirs``). Each
            entry is a task name (unknown names raise with suggestions), a path to a task
            directory or a directory of tasks (``./mytasks``: all of them), or ``@SET``, an
            installed task set (see :data:`TASK_PLUGIN_GROUP`).
        task_dirs: extra directories holding task directories (or task directories).
    """
    dirs = {p.name: p for p in find_task_dirs(BUILTIN_TASKS_DIR)}
    for extra in task_dirs:
        for p in find_task_dirs(extra):
            dirs[p.name] = p
    if names is not None:
        if isinstance(names, str):
            names = [names]
        wanted, sources = resolve_sources(list(names))
        for source in sources:
            for p in find_task_dirs(source):
                dirs[p.name] = p
                wanted.append(p.name)
        for n in wanted:
            if n not in dirs:
                raise UnknownNameError("AppGen task", n, dirs)
        dirs = {n: dirs[n] for n in wanted}
    return [load_task(dirs[n]) for n in sorted(dirs)]
