"""Sandbox speed: what running one command costs, cold and from the warm pool.

Measured with the Docker backend, the command being ``true`` (so only the sandbox's own
cost is timed):

* **cold start**: ``open_sandbox("docker")``, ``run(["true"])``, ``close()``: a container
  created, started, used and removed;
* **pool**: ``acquire()``, ``run(["true"])``, ``release()`` on a warm
  :class:`~agentgym.sandbox.SandboxPool` (this includes the clean-up of the previous
  holder's files and processes, which runs inside the same exec);
* **bare exec (SDK)**: the Docker SDK's ``exec_run(["true"])`` in a running sandbox
  container, as the same user: create, start, inspect, nothing else;
* **bare exec (CLI)**: ``docker exec -u 1000:1000 <container> true`` from a shell, if the
  ``docker`` command is installed;
* **throughput**: 8 threads on a pool of 8, each looping acquire, run, release.

The pool and bare-exec samples are interleaved so that load from other processes hits both
alike; medians are reported. Ratio ``pool_vs_bare_exec_x`` = pool median / bare SDK exec
median (the goal is at most 1.5); ``pool_vs_docker_cli_x`` is the same against the CLI.
For reference the local backend's ``run(["true"])`` is timed too.

Run: ``python -m agentgym.benchmarks.perf.sandbox`` (``AGENTGYM_PERF_QUICK=1`` for a short
run); needs a Docker engine and the image (``scripts/ensure_docker.sh``).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any


def _ms(samples: list[float]) -> float:
    return round(1000 * statistics.median(samples), 1)


def _time(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _local_figures(n: int) -> dict[str, Any]:
    from agentgym.sandbox import open_sandbox

    with open_sandbox("local") as sb:
        sb.run(["true"])
        samples = [_time(lambda: sb.run(["true"])) for _ in range(n)]
        level = sb.isolation
    return {"local_level": level, "local_run_true_ms": _ms(samples)}


def _cold_starts(n: int) -> list[float]:
    """Seconds of ``n`` cold starts: open a Docker sandbox, run ``true``, close it."""
    from agentgym.sandbox import open_sandbox

    cold = []
    for _ in range(n):

        def once() -> None:
            with open_sandbox("docker") as sb:
                sb.run(["true"])

        cold.append(_time(once))
    return cold


def _pool_vs_bare(n: int) -> tuple[list[float], list[float], list[float]]:
    """Interleaved seconds of a pool cycle, a bare SDK exec and (every 4th) a CLI exec."""
    from agentgym.sandbox import SandboxPool, docker_client, open_sandbox

    api = docker_client().api
    pooled, bare, cli = [], [], []
    docker_cli = shutil.which("docker")
    with SandboxPool(size=2, backend="docker", prune=False) as pool, open_sandbox("docker") as ref:
        user = ref.limits.user
        cid = ref.container_id

        def bare_exec() -> None:
            exec_id = api.exec_create(cid, ["true"], user=user)["Id"]
            api.exec_start(exec_id)
            if api.exec_inspect(exec_id)["ExitCode"] != 0:
                raise RuntimeError("bare exec failed")

        def pool_cycle() -> None:
            sb = pool.acquire()
            try:
                if sb.run(["true"]).exit_code != 0:
                    raise RuntimeError("pool run failed")
            finally:
                pool.release(sb)

        def cli_exec() -> None:
            subprocess.run([docker_cli, "exec", "-u", user, cid, "true"], check=True)

        for _ in range(3):  # warm-up
            bare_exec()
            pool_cycle()
        for i in range(n):
            bare.append(_time(bare_exec))
            pooled.append(_time(pool_cycle))
            if docker_cli and i % 4 == 0:
                cli.append(_time(cli_exec))
    return pooled, bare, cli


def _throughput_wall(per_thread: int) -> float:
    """Seconds for 8 threads on a pool of 8 to each run ``per_thread`` acquire/run/release."""
    from agentgym.sandbox import SandboxPool

    with SandboxPool(size=8, backend="docker", prune=False) as pool:
        errors: list[str] = []

        def worker() -> None:
            for _ in range(per_thread):
                with pool.sandbox() as sb:
                    if sb.run(["true"]).exit_code != 0:
                        errors.append("run failed")

        threads = [threading.Thread(target=worker) for _ in range(8)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        if errors:
            raise RuntimeError(f"{len(errors)} runs failed during the throughput test")
    return wall


def run(quick: bool = False) -> dict[str, Any]:
    """Measure and print the table; returns the perf-report dict."""
    from agentgym.sandbox import docker_available

    quick = quick or os.environ.get("AGENTGYM_PERF_QUICK") == "1"
    n_cold = 3 if quick else 10
    n_hot = 20 if quick else 100
    per_thread = 5 if quick else 25
    figures: dict[str, Any] = {}
    why_not = docker_available()
    if why_not is not None:
        figures.update(_local_figures(n_hot))
        notes = f"Docker backend not measured: {why_not}"
        print(notes)
        return {"title": "Sandbox speed", "figures": figures, "notes": notes}

    figures["cold_open_run_close_ms"] = _ms(_cold_starts(n_cold))
    pooled, bare, cli = _pool_vs_bare(n_hot)
    figures["pool_acquire_run_release_ms"] = _ms(pooled)
    figures["bare_exec_sdk_ms"] = _ms(bare)
    if cli:
        figures["bare_docker_exec_cli_ms"] = _ms(cli)
    figures["pool_acquire_run_release_p90_ms"] = round(
        1000 * statistics.quantiles(pooled, n=10)[-1], 1
    )
    wall = _throughput_wall(per_thread)
    figures["throughput_8_concurrent_runs_per_s"] = round(8 * per_thread / wall, 1)
    figures["throughput_1_sequential_runs_per_s"] = round(1 / statistics.mean(pooled), 1)
    figures.update(_local_figures(n_hot))

    ratios = {"pool_vs_bare_exec_x": round(statistics.median(pooled) / statistics.median(bare), 2)}
    if cli:
        ratios["pool_vs_docker_cli_x"] = round(
            statistics.median(pooled) / statistics.median(cli), 2
        )
    notes = (
        f"{n_hot} interleaved samples (median), {n_cold} cold starts, 8 threads x "
        f"{per_thread} runs; {os.cpu_count()} CPUs. Goal: pool_vs_bare_exec_x <= 1.5."
    )
    _print_table(figures, ratios, notes)
    return {
        "title": "Sandbox speed (Docker backend)",
        "ratios": ratios,
        "figures": figures,
        "notes": notes,
    }


def _print_table(figures: dict[str, Any], ratios: dict[str, Any], notes: str) -> None:
    rows = [(k, v) for k, v in figures.items()] + [(k, v) for k, v in ratios.items()]
    width = max(len(k) for k, _ in rows)
    print(f"{'measure':<{width}}  value")
    print(f"{'-' * width}  -----")
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    print(notes)


if __name__ == "__main__":
    run()
