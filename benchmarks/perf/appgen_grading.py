"""AppGen grading time per task: the hidden tests of the reference solution, graded.

For every built-in task, :func:`agentgym.envs.appgen.grade` runs on the task's reference
solution in a warm sandbox from a :class:`~agentgym.sandbox.SandboxPool` (the sandbox is
acquired before the clock starts and released after it stops). The figures are the
grading (writing the files, running the hidden tests, reading the report) plus the
clean-up of the sandbox it leaves (every process and file of the grader and of the
project), which a pool otherwise does when the sandbox is next used. Each
task is graded ``repeats`` times (3, or 1 in quick mode) and the median is reported, with
the mean over tasks and the total. Every grading must score 1.0, or the benchmark fails.

Run: ``python -m agentgym.benchmarks.perf.appgen_grading`` (``--backend local`` for the
local backend, which grades without isolation: fine for the reference solutions, trusted
code; ``--tasks expr_calc todo_sqlite`` for some tasks, ``AGENTGYM_PERF_QUICK=1`` for one
repeat); the Docker backend needs ``scripts/ensure_docker.sh``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any


def run(
    quick: bool = False, backend: str = "docker", tasks: list[str] | None = None
) -> dict[str, Any]:
    """Grade every task's reference solution; print and return the per-task medians."""
    from agentgym.envs.appgen import grade, load_tasks
    from agentgym.sandbox import SandboxPool, docker_available

    quick = quick or os.environ.get("AGENTGYM_PERF_QUICK") == "1"
    repeats = 1 if quick else 3
    if backend == "docker" and docker_available() is not None:
        notes = f"Docker backend not measured: {docker_available()}"
        print(notes)
        return {"title": "AppGen grading time", "notes": notes}
    figures: dict[str, Any] = {}
    per_task: dict[str, float] = {}
    with SandboxPool(size=1, backend=backend, timeout=300) as pool:
        for task in load_tasks(tasks):
            samples = []
            for _ in range(repeats):
                sb = pool.acquire()
                try:
                    t0 = time.perf_counter()
                    result = grade(
                        task, task.reference_files(), sb, unsafe_local_grading=backend == "local"
                    )
                    sb.reset()
                    sb.run(["true"])  # the clean-up this grading left, done now
                    samples.append(time.perf_counter() - t0)
                finally:
                    pool.release(sb)
                if result.score != 1.0:
                    raise RuntimeError(f"{task.name}: the reference scored {result.score}")
            per_task[task.name] = statistics.median(samples)
            figures[f"{task.name}_s"] = round(per_task[task.name], 2)
            print(f"{task.name:<16} {per_task[task.name]:6.2f} s", flush=True)
    figures["mean_per_task_s"] = round(statistics.mean(per_task.values()), 2)
    figures["total_s"] = round(sum(per_task.values()), 2)
    notes = (
        f"{backend} backend, reference solutions, median of {repeats} per task, "
        f"{os.cpu_count()} CPUs."
    )
    print(f"{'mean':<16} {figures['mean_per_task_s']:6.2f} s\n{notes}")
    return {"title": f"AppGen grading time ({backend})", "figures": figures, "notes": notes}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="docker", choices=("docker", "local"))
    parser.add_argument("--tasks", nargs="*", default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    run(quick=args.quick, backend=args.backend, tasks=args.tasks)
