"""``agentgym appgen {new-task,check-task}``: write and prove AppGen tasks.

``new-task NAME --dir DIR`` writes a small but complete full-stack task to start from;
``check-task DIR`` grades it in a real sandbox (reference passes, scaffold fails, visible
tests within the hidden ones, mock services answer, forgetting is caught, hash stable).
The task format is described in docs/envs/appgen-tasks.md.
"""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``appgen`` command and its subcommands."""
    p = subparsers.add_parser(
        "appgen",
        help="write a new AppGen task, check that a task directory is sound",
        description="Authoring tools for AppGen-v0 tasks (see docs/envs/appgen-tasks.md).",
    )
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    sub = p.add_subparsers(dest="appgen_command", metavar="SUBCOMMAND")

    n = sub.add_parser(
        "new-task",
        help="write a working full-stack task to edit (passes check-task as written)",
        description=(
            "Write DIR/NAME: task.toml, spec, scaffold, visible and hidden tests (HTTP and "
            "browser), a mock service fixture and the reference solution of a small notes "
            "app. Edit it into your task, then run `agentgym appgen check-task DIR/NAME`."
        ),
    )
    n.add_argument("name", help="task name (lower-case identifier; also the app's package)")
    n.add_argument("--dir", default=".", help="where to create the task (default: .)")
    n.set_defaults(func=_new_task)

    c = sub.add_parser(
        "check-task",
        help="prove a task directory sound by grading it in a sandbox",
        description=(
            "Grade the task in one sandbox: the reference solution passes every hidden test, "
            "the bare scaffold passes none, the visible tests pass on the reference and ask "
            "for nothing the hidden tests do not check, the mock services answer every "
            "fixture route, forgetful files lose only early requirements, the content hash "
            "is stable. Exit status 1 when a check fails."
        ),
    )
    c.add_argument("dirs", nargs="+", metavar="DIR", help="task directories (or dirs of tasks)")
    c.add_argument(
        "--sandbox",
        default="docker",
        choices=["docker", "local"],
        help="backend (default: docker; full-stack tasks need its browser)",
    )
    c.add_argument("--json", action="store_true", help="print one JSON report per task")
    c.set_defaults(func=_check_task)


def _new_task(args: argparse.Namespace) -> int:
    from agentgym.envs.appgen import new_task

    root = new_task(args.name, args.dir)
    print(f"wrote {root}")
    print(f"next: edit it (docs/envs/appgen-tasks.md), then `agentgym appgen check-task {root}`")
    return 0


def _check_task(args: argparse.Namespace) -> int:
    import json
    import sys

    from agentgym.envs.appgen import check_task, find_task_dirs

    dirs = []
    for given in args.dirs:
        found = find_task_dirs(given)
        if not found:
            from agentgym import ConfigError

            raise ConfigError(
                f"{given} holds no AppGen task: a task is a folder with a task.toml (its "
                "spec, tests and solution beside it), or a folder of such folders. Start one "
                f"with `agentgym appgen new-task NAME --dir {given}`."
            )
        dirs += found
    out = sys.stderr if args.json else sys.stdout  # with --json, stdout holds only reports
    reports = []
    for d in dirs:
        report = check_task(
            d, backend=args.sandbox, progress=lambda line: print(line, file=out, flush=True)
        )
        reports.append(report)
        if args.json:
            print(json.dumps(report.to_dict()), flush=True)
        else:
            verdict = "sound" if report.ok else "NOT sound"
            print(f"{report.task}: {verdict} ({report.seconds:.0f} s)", flush=True)
    return 0 if reports and all(r.ok for r in reports) else 1
