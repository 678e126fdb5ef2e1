"""Hidden helpers that decide an assertion from plain data: what ``check-task`` flags.

A hidden test may import helper modules of its own (``tests_hidden/group.py``). The grader
resolves those names to its sealed copies whatever the project names its files (issue
43), but a helper is found by name, and a project module of the same name is one mistake
away: the day it were the project's, a helper called with plain data (numbers, strings,
what the app answered) would run project code whose answer the assertion then trusts. A
helper that only takes the test's fixtures (``group.balances(app)``) cannot: the project
never receives the grader's objects. :func:`helper_verdicts` finds, statically, every
assertion in a task's hidden test files that calls a hidden helper with none of the
test's fixtures among its arguments, directly or through a name assigned from such a
call. The fix: compute that value in the test module itself (never resolved by name), or
hand the helper the fixture it works on.
"""

from __future__ import annotations

import ast

from agentgym.envs.appgen.taskset import AppTask, is_test_file

__all__ = ["helper_modules", "helper_verdicts"]


def helper_modules(task: AppTask) -> set[str]:
    """Top-level names of the modules and packages among a task's hidden test files
    that are not test modules (the hidden tests' own helpers)."""
    out = set()
    for rel in task.hidden_tests:
        head, _, rest = rel.partition("/")
        if not rest and head.endswith(".py") and not is_test_file(rel):
            out.add(head[:-3])
        elif rest.endswith(".py") and head.isidentifier():
            out.add(head)
    return {n for n in out if n.isidentifier()}


def _helper_bindings(tree: ast.Module, helpers: set[str]) -> tuple[set[str], set[str]]:
    """Names the file binds to helper modules (``import group``) and to functions taken
    from them (``from group import spend``)."""
    modules, functions = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.partition(".")[0] in helpers:
                    modules.add((alias.asname or alias.name).partition(".")[0])
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").partition(".")[0] in helpers
        ):
            functions.update(alias.asname or alias.name for alias in node.names)
    return modules, functions


def _helper_call(node: ast.AST, modules: set[str], functions: set[str]) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    while isinstance(func, ast.Attribute):
        func = func.value
    if not isinstance(func, ast.Name):
        return False
    return func.id in functions if isinstance(node.func, ast.Name) else func.id in modules


def _takes_a_fixture(call: ast.Call, fixtures: set[str]) -> bool:
    args = [*call.args, *(k.value for k in call.keywords)]
    return any(isinstance(a, ast.Name) and a.id in fixtures for a in args)


def _verdicts_in(fn: ast.FunctionDef, modules: set[str], functions: set[str]) -> list[ast.Call]:
    """Calls of helpers with plain data whose result reaches an ``assert`` of ``fn``."""
    fixtures = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}

    def plain_calls(node: ast.AST) -> list[ast.Call]:
        return [
            c
            for c in ast.walk(node)
            if _helper_call(c, modules, functions) and not _takes_a_fixture(c, fixtures)
        ]

    tainted: dict[str, ast.Call] = {}
    found: list[ast.Call] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            calls = plain_calls(node.value)
            if calls:
                for target in node.targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            tainted[name.id] = calls[0]
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            found += plain_calls(node.test)
            found += [
                tainted[n.id]
                for n in ast.walk(node.test)
                if isinstance(n, ast.Name) and n.id in tainted
            ]
    return found


def helper_verdicts(task: AppTask) -> list[str]:
    """``"file:line: call"`` for every assertion of a hidden test that a hidden helper
    decides from plain data (see the module docstring); empty when there is none."""
    helpers = helper_modules(task)
    out: list[str] = []
    for rel, data in sorted(task.hidden_tests.items()):
        if not (rel.endswith(".py") and is_test_file(rel)) or not helpers:
            continue
        try:
            tree = ast.parse(data.decode("utf-8", "replace"))
        except SyntaxError:
            continue
        modules, functions = _helper_bindings(tree, helpers)
        seen: set[tuple[int, int]] = set()
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for call in _verdicts_in(fn, modules, functions):
                if (call.lineno, call.col_offset) not in seen:
                    seen.add((call.lineno, call.col_offset))
                    out.append(
                        f"{rel}:{call.lineno}: `{ast.unparse(call)}` decides an assertion from "
                        "plain data in a helper the project could name: compute it in the test "
                        "module, or pass the helper only fixtures"
                    )
    return out
