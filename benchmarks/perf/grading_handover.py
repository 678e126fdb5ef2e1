"""AppGen episodes' sandbox time, this code against a baseline checkout, interleaved.

Every built-in task is played as an episode of ``agentgym/AppGen-v0`` on the Docker
backend: ``reset``, then one reply that writes the reference solution and submits (one
more submit per further stage; memory turns off), so the figures are what an episode
pays for its sandboxes, with the pools as the env uses them:

* ``setup_s``: ``reset``'s workspace (acquiring a sandbox from the shared pool, writing
  the scaffold, reading the file tree; ``episode_metrics["sandbox_setup_seconds"]``);
* ``grade_s``: the grading (acquiring a grading sandbox, the hidden tests, the release;
  ``episode_metrics["grade_seconds"]``);
* ``episode_s``: the whole episode, wall clock.

The env's pools are per limits (each task's ``command_timeout`` among them), so a task's
first episode starts its pools' first containers: its figures are reported apart
(``cold``); with ``--repeats 2`` or more the later rounds (``warm``) are what a training
run pays once its pools are started, and the ratios are taken on them.

With ``--baseline DIR`` (a checkout of another commit, e.g. ``git worktree add DIR
<commit>``) the same episodes run in two long-lived processes, one importing this code and
one the baseline's (so each keeps its pools warm, as a training run does), alternating
task by task and which goes first, so that load hits both alike. The baseline's
``agentgym`` is laid out from its ``pyproject.toml`` (``package-dir``) in a temporary
directory of links. Every episode must score 1.0 (the reference), or the run fails.
Ratios: ``grade_s_ratio``, ``setup_s_ratio``, ``episode_s_ratio`` = mean this code / mean
baseline over the warm rounds (the cold one with ``--repeats 1``; above 1: this code is
slower). Without a baseline, this code's figures alone.

Run: ``python -m agentgym.benchmarks.perf.grading_handover [--baseline DIR] [--tasks A B]
[--repeats N]`` (needs ``scripts/ensure_docker.sh``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

#: one process's side: reads task names on stdin, plays each, prints one JSON line each
_WORKER = r"""
import json, logging, sys, time
import gymnasium as gym
import agentgym
from agentgym.envs.appgen import load_tasks
logging.disable(logging.WARNING)
tasks = {t.name: t for t in load_tasks()}
env = gym.make("agentgym/AppGen-v0", sandbox="docker", memory={"enabled": False})
print(json.dumps({"ready": agentgym.__file__}), flush=True)
for line in sys.stdin:
    name = line.strip()
    t = tasks[name]
    reply = "".join(
        f'<write path="{p}">\n{d.decode()}</write>\n' for p, d in sorted(t.solution.items())
    )
    t0 = time.perf_counter()
    env.reset(seed=0, options={"task": name})
    done = False
    while not done:
        _, reward, term, trunc, info = env.step(reply + "<submit/>")
        reply, done = "", term or trunc
    m = env.unwrapped.episode_metrics
    print(json.dumps({
        "task": name, "reward": reward, "errors": info["reward_breakdown"]["errors"],
        "setup_s": m["sandbox_setup_seconds"], "grade_s": m["grade_seconds"],
        "episode_s": time.perf_counter() - t0,
    }), flush=True)
env.close()
"""

FIGURES = ("setup_s", "grade_s", "episode_s")


def layout(checkout: Path, into: Path) -> Path:
    """A directory whose ``agentgym`` package is ``checkout``'s, laid out as its
    ``pyproject.toml`` maps folders to packages (links only); returns ``into``."""
    meta = tomllib.loads((checkout / "pyproject.toml").read_text())
    mapping = meta["tool"]["setuptools"]["package-dir"]
    root = into / "agentgym"
    root.mkdir(parents=True)
    for entry in (checkout / mapping["agentgym"]).iterdir():
        (root / entry.name).symlink_to(entry)
    for package, folder in mapping.items():
        if package != "agentgym":
            (root / package.split(".", 1)[1]).symlink_to(checkout / folder)
    return into


class Side:
    """One long-lived worker process (this code, or the baseline's with ``path``)."""

    def __init__(self, label: str, path: Path | None, cwd: str) -> None:
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        if path is not None:
            env["PYTHONPATH"] = str(path)
        self.label = label
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=cwd,  # not a checkout: its agentgym/ folder would shadow the chosen one
            env=env,
        )
        self.ready = json.loads(self._line())["ready"]

    def _line(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.label} worker died (see its error output above)")
        return line

    def play(self, task: str) -> dict[str, Any]:
        self.proc.stdin.write(task + "\n")
        self.proc.stdin.flush()
        out = json.loads(self._line())
        if out["reward"] != 1.0:
            raise RuntimeError(f"{self.label}: {task} scored {out['reward']}: {out['errors']}")
        return out

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


def run(
    quick: bool = False,
    baseline: str | None = None,
    tasks: list[str] | None = None,
    repeats: int = 1,
) -> dict[str, Any]:
    """Play every task (``repeats`` times) on this code, interleaved with ``baseline``."""
    from agentgym.envs.appgen import builtin_task_names
    from agentgym.sandbox import docker_available

    if docker_available() is not None:
        return {"title": "AppGen episodes' sandbox time", "notes": docker_available()}
    names = tasks or builtin_task_names()
    if quick or os.environ.get("AGENTGYM_PERF_QUICK") == "1":
        names = names[:2]
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="agentgym-handover-") as tmp:
        sides = [Side("this code", None, tmp)]
        if baseline:
            sides.append(Side("baseline", layout(Path(baseline).resolve(), Path(tmp)), tmp))
        rows: dict[str, list[dict[str, Any]]] = {s.label: [] for s in sides}
        try:
            for i, name in enumerate(names * repeats):
                for side in sides if i % 2 == 0 else sides[::-1]:
                    row = side.play(name)
                    row["round"] = i // len(names)
                    rows[side.label].append(row)
                    print(f"{side.label:>9} {name:<18} " + _fmt(row), flush=True)
        finally:
            for side in sides:
                side.close()
    load.append(os.getloadavg()[0])
    return _result(rows, sides, names, repeats, load)


def _fmt(row: dict[str, Any]) -> str:
    return "  ".join(f"{k} {row[k]:6.2f}" for k in FIGURES)


def _result(rows, sides, names, repeats, load) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    ratios: dict[str, float] = {}
    kept = "warm" if repeats > 1 else "cold"
    for side in sides:
        key = "this" if side.label == "this code" else "baseline"
        for part, chosen in (("cold", [0]), ("warm", range(1, repeats))):
            picked = [r for r in rows[side.label] if r["round"] in chosen]
            for fig in FIGURES if picked else ():
                values = [r[fig] for r in picked]
                figures[f"{key}/{part}/{fig}_mean"] = round(statistics.mean(values), 3)
                figures[f"{key}/{part}/{fig}_total"] = round(sum(values), 1)
        figures[f"{key}/code"] = side.ready
    if len(sides) == 2:
        for fig in FIGURES:
            ratios[f"{fig}_ratio"] = round(
                figures[f"this/{kept}/{fig}_mean"] / figures[f"baseline/{kept}/{fig}_mean"], 3
            )
    notes = (
        f"ratios on the {kept} round(s); {len(names)} tasks x {repeats}, Docker backend, reference solutions as one-reply "
        f"episodes; {os.cpu_count()} CPUs, load average {load[0]:.1f} at the start and "
        f"{load[1]:.1f} at the end"
        + ("; interleaved with the baseline task by task" if len(sides) == 2 else "")
    )
    return {
        "title": "AppGen episodes' sandbox time (workspace, grading)",
        "ratios": ratios,
        "figures": figures,
        "notes": notes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="a checkout of the code to compare with")
    parser.add_argument("--tasks", nargs="*", default=None)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    result = run(args.quick, args.baseline, args.tasks, args.repeats)
    print(result["title"])
    for name, value in {**result.get("ratios", {}), **result.get("figures", {})}.items():
        print(f"  {name:>28}: {value}")
    print(result["notes"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
