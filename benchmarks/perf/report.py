"""Run every perf benchmark module and write one Markdown report.

Usage::

    python -m agentgym.benchmarks.perf [--quick] [--only NAME ...] [--out REPORT.md]
    agentgym bench perf [--quick] [--only NAME ...] [--out REPORT.md]

Each module found in :mod:`agentgym.benchmarks.perf` runs in a fresh subprocess (one
crash or hang cannot take the others down; ``--timeout`` bounds each). If it defines
``run(quick)`` the child prints its result as JSON after a marker line; otherwise the
module is run with ``python -m`` and its standard output goes into the report as it is.
A failed or timed-out module is reported as such, with the end of its error output,
and the report is still written; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import inspect
import json
import os
import pkgutil
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE = "agentgym.benchmarks.perf"
#: modules of the package that are not benchmarks
NOT_BENCHMARKS = frozenset({"report", "__main__"})
MARKER = "@@agentgym-perf-result@@"
#: exit status of a child whose module has no run(): the parent then runs it with -m
NO_RUN = 3
TAIL_LINES = 60


def discover(package: str = PACKAGE) -> list[str]:
    """Names of the benchmark modules in ``package``, sorted."""
    pkg = importlib.import_module(package)
    names = [
        m.name
        for m in pkgutil.iter_modules(pkg.__path__)
        if m.name not in NOT_BENCHMARKS and not m.name.startswith("_")
    ]
    return sorted(names)


@dataclass
class Outcome:
    """What one benchmark module produced."""

    name: str
    status: str  # "ok", "failed", "timeout"
    seconds: float
    result: dict[str, Any] | None = None
    stdout: str = ""
    error: str = ""
    mode: str = "run()"
    ratios: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}/{k}" if prefix else str(k), v, out)
    elif isinstance(value, list | tuple):
        out[prefix] = ", ".join(str(v) for v in value)
    else:
        out[prefix] = value


def split_result(result: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(ratios, figures)`` of a ``run()`` result (see the package docstring)."""
    ratios: dict[str, Any] = {}
    figures: dict[str, Any] = {}
    _flatten("", result.get("ratios") or {}, ratios)
    _flatten("", result.get("figures") or {}, figures)
    for k, v in result.items():
        if k in ("ratios", "figures", "title", "notes"):
            continue
        _flatten(str(k), v, figures)
    return ratios, figures


def _tail(text: str, n: int = TAIL_LINES) -> str:
    lines = text.rstrip().splitlines()
    return "\n".join(lines[-n:])


def run_module(name: str, *, quick: bool, timeout: float, package: str = PACKAGE) -> Outcome:
    """Run one benchmark module of ``package`` in a subprocess (see the module docstring)."""
    env = {**os.environ, "AGENTGYM_PERF_QUICK": "1" if quick else "0"}
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", f"{PACKAGE}.report", "--child", name, "--package", package]
    if quick:
        cmd.append("--quick")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        return Outcome(
            name, "timeout", time.monotonic() - t0, error=_tail(_text(e.stderr)), mode="run()"
        )
    if p.returncode == NO_RUN:
        try:
            p = subprocess.run(
                [sys.executable, "-m", f"{package}.{name}"],
                capture_output=True,
                text=True,
                timeout=max(1.0, timeout - (time.monotonic() - t0)),
                env=env,
            )
        except subprocess.TimeoutExpired as e:
            return Outcome(
                name,
                "timeout",
                time.monotonic() - t0,
                stdout=_tail(_text(e.stdout)),
                error=_tail(_text(e.stderr)),
                mode="python -m",
            )
        status = "ok" if p.returncode == 0 else "failed"
        return Outcome(
            name,
            status,
            time.monotonic() - t0,
            stdout=_tail(p.stdout, 200),
            error="" if status == "ok" else _tail(p.stderr),
            mode="python -m",
        )
    seconds = time.monotonic() - t0
    result = None
    for line in p.stdout.splitlines():
        if line.startswith(MARKER):
            result = json.loads(line[len(MARKER) :])
    printed = "\n".join(ln for ln in p.stdout.splitlines() if not ln.startswith(MARKER))
    if p.returncode != 0 or not isinstance(result, dict):
        why = _tail(p.stderr) or f"exit status {p.returncode}, no result printed"
        return Outcome(name, "failed", seconds, stdout=_tail(printed), error=why)
    ratios, figures = split_result(result)
    return Outcome(
        name,
        "ok",
        seconds,
        result=result,
        stdout=_tail(printed),
        ratios=ratios,
        figures=figures,
    )


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode("utf-8", "replace")


def child(name: str, quick: bool, package: str = PACKAGE) -> int:
    """In the subprocess: import the module, call ``run``, print the result after MARKER."""
    module = importlib.import_module(f"{package}.{name}")
    run = getattr(module, "run", None)
    if not callable(run):
        return NO_RUN
    try:
        params = inspect.signature(run).parameters
    except (TypeError, ValueError):
        params = {}
    result = run(quick=quick) if "quick" in params else run()
    if not isinstance(result, Mapping):
        print(
            f"{package}.{name}.run() returned {type(result).__name__}; it must return a dict "
            "(see agentgym.benchmarks.perf's docstring).",
            file=sys.stderr,
        )
        return 1
    sys.stdout.flush()
    print(MARKER + json.dumps(dict(result), default=str), flush=True)
    return 0


# ------------------------------------------------------------------------------ machine


def machine_info() -> dict[str, str]:
    """The machine the report ran on (CPU, memory, GPU, versions, git commit)."""
    info: dict[str, str] = {
        "host": platform.node(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cpu cores": str(os.cpu_count()),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                kib = int(line.split()[1])
                info["memory"] = f"{kib / 1024 / 1024:.1f} GiB"
                break
    except (OSError, ValueError):
        pass
    gpu = "none"
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            if out.returncode == 0 and out.stdout.strip():
                gpu = "; ".join(x.strip() for x in out.stdout.strip().splitlines())
        except (OSError, subprocess.TimeoutExpired):
            pass
    info["gpu"] = gpu
    from importlib.metadata import PackageNotFoundError, version

    for pkg in ("agentgym", "torch", "transformers", "trl", "vllm"):
        try:
            info[pkg] = version(pkg)
        except PackageNotFoundError:
            continue
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=Path(__file__).resolve().parent,
        )
        if out.returncode == 0:
            info["git commit"] = out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


# ------------------------------------------------------------------------------ report


def _fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.3e}"
        return f"{v:.3f}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def render_report(
    outcomes: Sequence[Outcome],
    machine: Mapping[str, str],
    *,
    quick: bool,
    package: str = PACKAGE,
) -> str:
    """The Markdown report."""
    now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    lines = [
        "# agentgym performance report",
        "",
        f"Generated {now}; mode: {'quick' if quick else 'full'}. "
        "Ratios compare agentgym with the baseline each benchmark names.",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        *[f"| {k} | {_fmt(v)} |" for k, v in machine.items()],
        "",
        "## Summary",
        "",
        "| benchmark | status | seconds | ratio | value |",
        "|---|---|---:|---|---:|",
    ]
    for o in outcomes:
        if o.ratios:
            for i, (k, v) in enumerate(o.ratios.items()):
                head = (o.name, o.status, f"{o.seconds:.1f}") if i == 0 else ("", "", "")
                lines.append(f"| {' | '.join(head)} | {k} | {_fmt(v)} |")
        else:
            why = "see output below" if o.status == "ok" else o.status
            lines.append(f"| {o.name} | {o.status} | {o.seconds:.1f} | ({why}) | |")
    if not outcomes:
        lines.append("| (no benchmark modules found) | | | | |")
    lines.append("")
    for o in outcomes:
        title = (o.result or {}).get("title")
        lines += [f"## {o.name}" + (f": {title}" if title else ""), ""]
        lines.append(
            f"Status: **{o.status}** ({o.mode}, {o.seconds:.1f} s). "
            f"Run alone: `python -m {package}.{o.name}`."
        )
        lines.append("")
        notes = (o.result or {}).get("notes")
        if notes:
            lines += [str(notes), ""]
        if o.ratios or o.figures:
            lines += ["| kind | name | value |", "|---|---|---:|"]
            lines += [f"| ratio | {k} | {_fmt(v)} |" for k, v in o.ratios.items()]
            lines += [f"| figure | {k} | {_fmt(v)} |" for k, v in o.figures.items()]
            lines.append("")
        if o.stdout.strip() and not o.ratios and not o.figures:
            lines += ["```text", o.stdout.rstrip(), "```", ""]
        if o.error.strip():
            lines += ["Error output (last lines):", "", "```text", o.error.rstrip(), "```", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agentgym.benchmarks.perf",
        description="Run agentgym's perf benchmarks and write one Markdown report.",
    )
    parser.add_argument("--quick", action="store_true", help="small, fast settings")
    parser.add_argument("--only", action="append", default=[], metavar="NAME")
    parser.add_argument("--out", default="perf_report.md", help="report path")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per module")
    parser.add_argument(
        "--package", default=PACKAGE, help="package whose modules are the benchmarks"
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, args.quick, args.package)

    names = discover(args.package)
    if args.only:
        unknown = sorted(set(args.only) - set(names))
        if unknown:
            print(
                f"unknown perf benchmark(s) {unknown}; available: {', '.join(names)}",
                file=sys.stderr,
            )
            return 2
        names = [n for n in names if n in args.only]
    outcomes = []
    for name in names:
        print(f"[perf] {name} ...", file=sys.stderr, flush=True)
        o = run_module(name, quick=args.quick, timeout=args.timeout, package=args.package)
        print(f"[perf] {name}: {o.status} ({o.seconds:.1f}s)", file=sys.stderr, flush=True)
        outcomes.append(o)
    report = render_report(outcomes, machine_info(), quick=args.quick, package=args.package)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report, encoding="utf-8")
    print(f"[perf] wrote {out}", file=sys.stderr)
    return 0 if all(o.status == "ok" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
