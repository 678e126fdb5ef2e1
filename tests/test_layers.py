"""The layer rules of docs/architecture.md, checked on every import in the source tree.

Layers, lowest first: the core ``agentgym`` (with its process-health package
``agentgym.health``) -> ``agentgym.sandbox`` -> ``agentgym.envs`` -> the models and engines
``agentgym.generation`` -> ``agentgym.trainers``
-> the planner ``agentgym.plan`` -> the server ``agentgym.serve`` -> ``agentgym.benchmarks``
-> the CLI (``agentgym.cli`` and ``agentgym.__main__``). The generation layer, the planner, the
server, the health package and the CLI are folders of ``agentgym/`` whose layer is not the core's: a module
belongs to the layer of the longest prefix that names it. Every ``import`` statement is read with :mod:`ast`, those inside
functions and methods included (only ``if TYPE_CHECKING:`` blocks are skipped: they
never run), and checked against three rules:

1. Nothing imports a higher layer. The one exception is the core's registration, which
   reads the table of string entry points in ``agentgym.envs`` (as Gymnasium's own
   registration does); it imports no env code.
2. Another package is used through its public names only: the target must be a package
   (its ``__init__``), not a module inside it, nothing on the path may start with ``_``,
   and every name taken from it must be in its ``__all__``. A module may use the
   modules of its own package and of the packages above it in the same layer freely.
3. No import cycles, counting imports inside functions (they only defer a cycle).

A failure lists every offending import as ``file:line``.
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: import name -> source folder, as pyproject.toml's package-dir maps them
FOLDERS = {
    "agentgym": "agentgym",
    "agentgym.sandbox": "sandbox",
    "agentgym.envs": "envs",
    "agentgym.trainers": "trainers",
    "agentgym.benchmarks": "benchmarks",
}
#: the layers, lowest first (a module belongs to the longest prefix that matches)
LAYERS = (
    ("core", ("agentgym",)),
    ("sandbox", ("agentgym.sandbox",)),
    ("envs", ("agentgym.envs",)),
    ("generation", ("agentgym.generation",)),
    ("trainers", ("agentgym.trainers",)),
    ("plan", ("agentgym.plan",)),
    ("serve", ("agentgym.serve",)),
    ("benchmarks", ("agentgym.benchmarks",)),
    ("cli", ("agentgym.cli", "agentgym.__main__")),
)
#: (importer, target) pairs allowed to point upwards, with the reason
UPWARD_EXCEPTIONS = {
    ("agentgym.registration", "agentgym.envs"): "the registration table (string entry points)",
}
#: folders that hold task data, not source (their .py files belong to tasks)
DATA_FOLDERS = (ROOT / "envs" / "appgen" / "tasks",)


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


@dataclass(frozen=True)
class Import:
    importer: Module
    target: str  # a module name
    names: tuple[str, ...]  # names taken with ``from target import ...`` (() for ``import``)
    line: int

    def where(self) -> str:
        return f"{self.importer.path.relative_to(ROOT)}:{self.line}"


@cache
def source_modules() -> dict[str, Module]:
    mods: dict[str, Module] = {}
    for name, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            if any(path.is_relative_to(d) for d in DATA_FOLDERS):
                continue
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            full = ".".join([name, *parts])
            if full in mods and mods[full].path != path:  # agentgym.envs is both
                continue
            mods[full] = Module(full, path, is_package)
    return mods


def layer_of(module: str) -> int:
    best, best_len = 0, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = i, len(p)
    return best


def _type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST):
    for child in ast.iter_child_nodes(node):
        if _type_checking_block(child):
            continue
        yield child
        yield from _walk(child)


@cache
def all_imports() -> tuple[Import, ...]:
    mods = source_modules()
    out: list[Import] = []
    for mod in mods.values():
        tree = ast.parse(mod.path.read_text(encoding="utf-8"), filename=str(mod.path))
        for node in _walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    out.append(Import(mod, alias.name, (), node.lineno))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                names = tuple(a.name for a in node.names)
                # ``from pkg import submodule`` imports the submodule itself
                plain = tuple(n for n in names if f"{target}.{n}" not in mods)
                if plain:
                    out.append(Import(mod, target, plain, node.lineno))
                for n in names:
                    if f"{target}.{n}" in mods:
                        out.append(Import(mod, f"{target}.{n}", (), node.lineno))
    return tuple(i for i in out if i.target == "agentgym" or i.target.startswith("agentgym."))


@cache
def public_names(package: str) -> frozenset[str]:
    return frozenset(getattr(importlib.import_module(package), "__all__", ()))


def _problem(imp: Import) -> str | None:
    mods = source_modules()
    src = imp.importer
    if imp.target not in mods:
        return f"imports {imp.target}, which is not a module of the source tree"
    tgt = mods[imp.target]
    lo, lt = layer_of(src.name), layer_of(tgt.name)
    if lt > lo:
        if (src.name, tgt.name) in UPWARD_EXCEPTIONS:
            return None
        return (
            f"{src.name} ({LAYERS[lo][0]} layer) imports {tgt.name} from the higher "
            f"{LAYERS[lt][0]} layer"
        )
    own = src.package
    if lt == lo and (tgt.package == own or own.startswith(tgt.package + ".")):
        return None  # its own package, or a package above it in the same layer
    if not tgt.is_package:
        return (
            f"{src.name} imports {tgt.name}, a module inside another package: import it "
            f"from {tgt.package} (and export it there)"
        )
    if any(part.startswith("_") for part in tgt.name.split(".")):
        return f"{src.name} imports the private package {tgt.name}"
    exported = public_names(tgt.name)
    hidden = [n for n in imp.names if n != "*" and n not in exported]
    if hidden:
        return f"{src.name} takes {', '.join(hidden)} from {tgt.name}, which does not export it"
    return None


def layer_violations() -> list[str]:
    return sorted(
        f"{imp.where()}: {msg}" for imp in all_imports() if (msg := _problem(imp)) is not None
    )


def import_cycles() -> list[list[str]]:
    """Strongly connected components (more than one module) of the import graph.

    A package's ``__init__`` importing its own modules is not a cycle by itself; a module
    that imports its package's ``__init__`` back (``from agentgym.sandbox import ...``
    inside ``agentgym.sandbox.pool``) closes one.
    """
    mods = source_modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for imp in all_imports():
        if imp.target in mods and imp.target != imp.importer.name:
            graph[imp.importer.name].add(imp.target)
    # Tarjan's algorithm, iterative
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))
    return comps


def _cycle_lines(comp: list[str]) -> list[str]:
    members = set(comp)
    return sorted(
        f"  {imp.where()}: {imp.importer.name} -> {imp.target}"
        for imp in all_imports()
        if imp.importer.name in members and imp.target in members
    )


# ----------------------------------------------------------------------------- tests


def test_the_walker_sees_the_whole_tree():
    mods = source_modules()
    assert {"agentgym", "agentgym.sandbox", "agentgym.envs", "agentgym.trainers"} <= set(mods)
    assert "agentgym.cli" in mods and "agentgym.envs.appgen" in mods
    # imports inside functions are seen too (the CLI imports its subcommands lazily)
    cli = [i for i in all_imports() if i.importer.name.startswith("agentgym.cli.")]
    assert any(i.target.startswith("agentgym.trainers") for i in cli)


def test_layer_order_and_public_names():
    bad = layer_violations()
    assert not bad, "imports against docs/architecture.md's layer rules:\n" + "\n".join(bad)


def test_no_import_cycles():
    cycles = import_cycles()
    text = "\n".join(
        "cycle: " + " <-> ".join(c) + "\n" + "\n".join(_cycle_lines(c)) for c in cycles
    )
    assert not cycles, "import cycles (imports inside functions count):\n" + text


def test_the_rules_catch_each_kind_of_violation(tmp_path):
    """The checker itself: a made-up import of each kind is reported."""
    mods = source_modules()
    core = mods["agentgym.rollouts"]
    envs_mod = mods["agentgym.envs.memory_recall"]
    upward = Import(core, "agentgym.trainers", (), 1)
    inside = Import(envs_mod, "agentgym.rollouts", (), 2)
    hidden = Import(envs_mod, "agentgym", ("no_such_public_name",), 3)
    fine = Import(envs_mod, "agentgym", ("ConversationEnv",), 4)
    assert "higher" in (_problem(upward) or "")
    assert "inside another package" in (_problem(inside) or "")
    assert "does not export" in (_problem(hidden) or "")
    assert _problem(fine) is None
