"""One node's ``agentgym train --nproc N``: ranks forked by ``agentgym.cli.local_ranks``
against ranks started by torchrun (``AGENTGYM_LAUNCHER=torchrun``, the baseline).

The same short run (tiny-qwen2 built in process, BalancedMath, FSDP2, one step of 2 x 4
episodes of at most 16 tokens, held-out evaluation of 2 tasks at both ends) is launched
through each launcher in alternation, ``pairs`` times, from this process. For each
launch: its wall seconds, and the CPU seconds of its whole process tree (the launcher,
torchrun or ``local_ranks``, the ranks and their helpers, from ``RUSAGE_CHILDREN``).
Reported: the medians of each side and the ratios torchrun / forked. On a machine with
GPUs ``local_ranks`` is not used (see :mod:`agentgym.cli.local_ranks`); this measures
what it saves on a CPU machine, most of it the imports every torchrun rank repeats.

Run: ``python -m agentgym.benchmarks.perf.launch [--quick] [--nproc N]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _command(out: Path, nproc: int) -> list[str]:
    return [
        sys.executable, "-m", "agentgym", "train", "--nproc", str(nproc),
        "model.preset=tiny-qwen2", "envs=[{id: agentgym/BalancedMath-v0}]",
        "distributed.strategy=fsdp2", "run.max_steps=1", "rollout.batch_tasks=2",
        "rollout.group_size=4", "rollout.max_tokens=16", "eval.num_tasks=2",
        f"run.output_dir={out}", "run.progress=false", "run.plots=false", "run.save_every=0",
    ]  # fmt: skip


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _launch(out: Path, nproc: int, launcher: str) -> tuple[float, float]:
    """One launch: (wall seconds, CPU seconds of its process tree)."""
    env = {**os.environ, "AGENTGYM_LAUNCHER": launcher}
    cpu0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(_command(out, nproc), capture_output=True, text=True, env=env)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    if proc.returncode != 0:
        raise RuntimeError(f"{launcher} launch failed:\n{proc.stderr[-3000:]}")
    return wall, cpu


def run(quick: bool = False, nproc: int = 2) -> dict[str, Any]:
    """Launch through both launchers in alternation (see the module docstring)."""
    quick = quick or os.environ.get("AGENTGYM_PERF_QUICK") == "1"
    pairs = 2 if quick else 4
    got: dict[str, list[tuple[float, float]]] = {"forked": [], "torchrun": []}
    with tempfile.TemporaryDirectory(prefix="agentgym-launch-") as tmp:
        for i in range(pairs):
            order = ("forked", "torchrun") if i % 2 == 0 else ("torchrun", "forked")
            for side in order:
                out = Path(tmp) / f"{side}-{i}"
                got[side].append(_launch(out, nproc, "local" if side == "forked" else "torchrun"))
    med = {
        side: (statistics.median(w for w, _ in rows), statistics.median(c for _, c in rows))
        for side, rows in got.items()
    }
    return {
        "title": f"one-node launch, --nproc {nproc}: forked ranks vs torchrun",
        "ratios": {
            "cpu_torchrun_over_forked_x": med["torchrun"][1] / med["forked"][1],
            "wall_torchrun_over_forked_x": med["torchrun"][0] / med["forked"][0],
        },
        "figures": {
            "forked_wall_s": med["forked"][0],
            "forked_cpu_s": med["forked"][1],
            "torchrun_wall_s": med["torchrun"][0],
            "torchrun_cpu_s": med["torchrun"][1],
            "pairs": pairs,
        },
        "notes": "medians over alternating launches of a one-step FSDP2 run (tiny-qwen2)",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args(argv)
    result = run(quick=args.quick, nproc=args.nproc)
    print(result["title"])
    for name, value in {**result["figures"], **result["ratios"]}.items():
        print(f"  {name}: {value:.2f}" if isinstance(value, float) else f"  {name}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
