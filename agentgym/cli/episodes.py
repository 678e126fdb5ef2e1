"""``agentgym episodes export RUN_DIR --format parquet``: episodes as a dataset file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "episodes",
        help="episodes of a run as a Hugging Face dataset / Parquet file",
        description="Work with the episode files agentgym writes (agentgym eval --out, "
        "agentgym bench, a training run's samples.jsonl). See docs/integrations.md.",
    )
    inner = p.add_subparsers(dest="episodes_command", metavar="ACTION")
    e = inner.add_parser(
        "export",
        help="write a folder's episodes as one Parquet file (or a datasets folder)",
        description=(
            "Collect the episodes of RUN_DIR (every JSONL file of episodes under it: "
            "agentgym eval --out, agentgym bench, a training run's samples.jsonl; or one "
            "such file) into one table, one row per episode with its conversations and "
            "turns nested and the policy and source file it came from, and write it as "
            "Parquet (datasets.load_dataset('parquet', data_files=...) reads it) or as a "
            "saved datasets.Dataset (--format dataset)."
        ),
    )
    e.add_argument("run_dir", help="a folder with episode JSONL files, or one such file")
    e.add_argument(
        "--format",
        choices=("parquet", "dataset"),
        default="parquet",
        help="default: %(default)s",
    )
    e.add_argument(
        "--out",
        default=None,
        help="output file or folder (default: RUN_DIR/episodes.parquet or RUN_DIR/episodes_dataset)",
    )
    e.set_defaults(func=cmd_export)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def cmd_export(args: argparse.Namespace) -> int:
    from agentgym import ConfigError
    from agentgym.trainers.integrations import (
        episodes_to_dataset,
        run_episodes_table,
        write_episodes_parquet,
    )

    root = Path(args.run_dir)
    table, files = run_episodes_table(root)
    if not files:
        raise ConfigError(
            f"no episode files under {str(root)!r} (JSONL files whose lines are episodes: "
            "`agentgym eval ... --out DIR/episodes.jsonl`, `agentgym bench`, a training "
            "run's samples.jsonl); pass such a folder or file."
        )
    base = root if root.is_dir() else root.parent
    if args.format == "parquet":
        out = Path(args.out) if args.out else base / "episodes.parquet"
        write_episodes_parquet(table, out)
    else:
        out = Path(args.out) if args.out else base / "episodes_dataset"
        episodes_to_dataset(table).save_to_disk(str(out))
    turns = sum(table.column("num_turns").to_pylist())
    policies = sorted({p for p in table.column("policy").to_pylist() if p})
    print(
        f"[agentgym episodes] {table.num_rows} episodes ({turns} turns) from {len(files)} "
        f"file(s){', policies: ' + ', '.join(policies) if policies else ''} -> {out}",
        file=sys.stderr,
    )
    return 0
