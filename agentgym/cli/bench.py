"""``agentgym bench SUITE --policy P``, ``agentgym bench perf`` and ``agentgym leaderboard``."""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="run a benchmark suite (resumable), or the perf suite with `bench perf`",
        description=(
            "Run a frozen benchmark suite with a policy and write episodes.jsonl and "
            "result.json under OUT/<suite>-<hash>/<policy>/. Running the same command again "
            "resumes an interrupted run. `agentgym bench perf` runs the performance "
            "benchmarks instead and writes a Markdown report."
        ),
    )
    p.add_argument(
        "suite",
        nargs="?",
        help="built-in suite name (see --list), a .json/.yaml suite file, or `perf`",
    )
    p.add_argument(
        "--policy",
        help="oracle | random | scripted:MODULE:FUNC | openai:MODEL[@URL] | hf:PATH[@ADAPTER]",
    )
    p.add_argument("--label", help="name shown on the leaderboard (default: the policy spec)")
    p.add_argument(
        "--concurrency", type=int, default=8, help="episodes in flight at once (default: 8)"
    )
    p.add_argument(
        "--out", default=None, help="results root (default bench_results; perf: perf_report.md)"
    )
    p.add_argument(
        "--limit", type=int, default=None, help="only the first N tasks of each suite entry"
    )
    p.add_argument("--list", action="store_true", help="list the built-in suites and exit")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    g = p.add_argument_group("perf")
    g.add_argument("--quick", action="store_true", help="perf: small, fast settings")
    g.add_argument(
        "--only", action="append", default=[], metavar="NAME", help="perf: run only these"
    )
    g.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        help="perf: seconds per benchmark module (default: 1800)",
    )
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser(
        "leaderboard",
        help="build the leaderboard (Markdown + static HTML) from a results folder",
        description="Rank every result.json under RESULTS_DIR (agentgym bench runs) by "
        "its suite's primary metric, per suite and suite version, ties broken by fewer "
        "tokens; write OUT/leaderboard.md and OUT/index.html (one self-contained page: "
        "sortable tables and a score-against-tokens plot). Partial runs are left out "
        "unless --include-partial.",
    )
    p.add_argument("results_dir", help="folder holding result.json files (searched recursively)")
    p.add_argument("--out", required=True, help="site folder for index.html and leaderboard.md")
    p.add_argument(
        "--include-partial",
        action="store_true",
        help="also rank partial results (--limit runs, interrupted runs)",
    )
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.set_defaults(func=cmd_leaderboard)


def cmd_bench(args: argparse.Namespace) -> int:
    from agentgym import ConfigError

    if args.list:
        return _list_suites()
    if not args.suite:
        raise ConfigError("Name a suite (see `agentgym bench --list`) or `perf`.")
    if args.suite == "perf":
        from agentgym.benchmarks.perf import report_main as perf_main

        argv = ["--out", args.out or "perf_report.md", "--timeout", str(args.timeout)]
        if args.quick:
            argv.append("--quick")
        for name in args.only:
            argv += ["--only", name]
        return perf_main(argv)

    from agentgym.benchmarks import get_suite, run_suite

    if not args.policy:
        raise ConfigError(
            "Pass --policy, e.g. --policy oracle, --policy openai:MODEL@http://HOST:8000/v1 "
            "or --policy hf:PATH."
        )
    suite = get_suite(args.suite)
    try:
        result = run_suite(
            suite,
            args.policy,
            out=args.out or "bench_results",
            concurrency=args.concurrency,
            limit=args.limit,
            label=args.label,
            progress=True,  # on stderr: --json's stdout stays JSON
        )
    except Exception as e:
        for note in getattr(e, "__notes__", []):
            print(note, file=sys.stderr)
        raise
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "tasks"}))
    else:
        _print_result(result)
    if result.get("failed_episodes"):
        print(
            f"agentgym bench: {result['failed_episodes']} episodes failed for infrastructure "
            f"reasons ({result['failed_by_reason']}) and are not scored; they are in "
            f"{result['_dir']}/failures.jsonl. Run the same command again to play them again.",
            file=sys.stderr,
        )
        return 1
    return 0


def _list_suites() -> int:
    from agentgym.benchmarks import get_suite, suite_names

    for name in suite_names():
        s = get_suite(name)
        print(
            f"{name:<16} {s.num_tasks:>4} tasks x {s.samples_per_task}  "
            f"envs: {', '.join(s.env_ids)}  {s.description}"
        )
    return 0


def _print_result(result: dict) -> None:
    suite = result["suite"]
    status = "complete" if result["complete"] else "PARTIAL"
    print(
        f"{suite['name']} (hash {suite['hash'][:12]})  policy {result['policy']['label']}  "
        f"{result['episodes']}/{result['expected_episodes']} episodes ({status}; "
        f"{result['resumed_episodes']} resumed, {result['new_episodes']} new)"
    )
    for m, cell in result["metrics"].items():
        label = result["labels"].get(m, m)
        if cell["value"] is None:
            print(f"  {label:>22}: -")
            continue
        print(f"  {label:>22}: {cell['value']:.4f}  [{cell['ci_low']:.4f}, {cell['ci_high']:.4f}]")
    usage = result["usage"]
    print(
        f"  tokens: {usage['completion_tokens']} generated in {usage['policy_calls']} calls; "
        f"wall time {result['wall_time_s']:.1f}s"
    )
    print(f"  result: {result['_dir']}/result.json")
    sys.stdout.flush()


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from agentgym.benchmarks import build_leaderboard

    summary = build_leaderboard(args.results_dir, args.out, include_partial=args.include_partial)
    if summary["left_out_partial"]:
        print(
            f"left out {len(summary['left_out_partial'])} partial run(s) (--limit, interrupted "
            "or with failed episodes): "
            + "; ".join(summary["left_out_partial"])
            + ". Pass --include-partial to show them.",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(summary))
        return 0
    for suite, rows in summary["suites"].items():
        print(suite)
        for rank, label in enumerate(rows, start=1):
            print(f"  {rank}. {label}")
    if not summary["suites"]:
        print("no complete results found (see --include-partial)")
    print(f"wrote {summary['markdown']} and {summary['html']}")
    return 0
