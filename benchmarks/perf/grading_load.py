"""Grading under concurrency on a loaded machine: are right answers still scored right?

Issue 17 found that with the trainer's 8 env threads on a busy machine 3-10 of 200
correct symbolic answers were scored wrong, and 80 of 200 at 32 threads: the wait for
a grading worker counted against the deadline and a timeout was a wrong answer.

This benchmark starts ``burners`` CPU-bound processes (default: one per core), then
grades ``answers`` distinct correct answers that all need the symbolic path (expanded
vs factored polynomials, radicals, multiples of pi, matrices, sets, inequalities vs
intervals; no two alike, so the
verdict cache never answers) from 8 and from 32 threads at once, through the public
:func:`agentgym.envs.math.grade`. For each thread count it reports how many were scored
correct, wrong, and failed as infrastructure (``result.infra_failure``: the env raises
``agentgym.InfraError`` for these instead of scoring them), the slowest call, and the
longest wait for a worker.

Ratios: ``correct_share_8_threads`` and ``correct_share_32_threads`` (1.0 means every
right answer was scored right).

Run: ``python -m agentgym.benchmarks.perf.grading_load [--quick] [--burners N]
[--answers N]``.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

#: (gold, right answer) templates that need sympy; {k} is a varying integer.
_TEMPLATES = [
    ("x^2+{k2}x+{ksq}", "(x+{k})^2"),
    ("(x-{k})(x+{k})", "x^2-{ksq}"),
    ("\\frac{{1}}{{2}}\\sqrt{{{k}}}", "\\frac{{\\sqrt{{{k}}}}}{{2}}"),
    ("{k}\\sqrt{{2}}", "\\sqrt{{{k2x2}}}"),
    ("x^2+{k}x", "x(x+{k})"),
    ("{k}\\pi", "\\pi\\cdot {k}"),
    (
        "\\begin{{pmatrix}}{k}&1\\\\0&{kp1}\\end{{pmatrix}}",
        "\\begin{{bmatrix}}{k}&\\frac{{2}}{{2}}\\\\0&{kp1}\\end{{bmatrix}}",
    ),
    ("\\frac{{x+{k}}}{{2}}", "\\frac{{x}}{{2}}+\\frac{{{k}}}{{2}}"),
    # sets and relations: decided by math-verify itself, not by evaluation
    ("\\pm\\sqrt{{{k}}}", "\\sqrt{{{k}}}, -\\sqrt{{{k}}}"),
    ("[\\sqrt{{{k}}}, \\infty)", "x \\ge \\sqrt{{{k}}}"),
]


def _answers(n: int, offset: int) -> list[tuple[str, str]]:
    """``n`` distinct (reply, gold) pairs, all right, all symbolic."""
    out: list[tuple[str, str]] = []
    k = 2 + offset
    while len(out) < n:
        if int(k**0.5) ** 2 == k:  # sqrt of a square would be decided in-process
            k += 1
            continue
        vals = {"k": k, "kp1": k + 1, "k2": 2 * k, "ksq": k * k, "k2x2": 2 * k * k}
        for gold_t, right_t in _TEMPLATES:
            reply = f"Some work.\nSo the answer is $\\boxed{{{right_t.format(**vals)}}}$."
            out.append((reply, gold_t.format(**vals)))
        k += 1
    return out[:n]


def _burn() -> None:  # pragma: no cover - runs in a child process
    x = 0
    while True:
        x = (x * 1_103_515_245 + 12_345) % 2_147_483_648


def _grade_all(pairs: list[tuple[str, str]], threads: int) -> dict[str, Any]:
    from agentgym.envs.math import grade

    def one(pair: tuple[str, str]) -> tuple[float, Any]:
        t = time.perf_counter()
        r = grade(*pair)
        return time.perf_counter() - t, r

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as ex:
        done = list(ex.map(one, pairs))
    wall = time.perf_counter() - t0
    results = [r for _, r in done]
    latencies = [t for t, _ in done]
    waits = [getattr(r, "wait_s", 0.0) for r in results]
    infra = [r for r in results if getattr(r, "infra_failure", False)]
    wrong = [r for r in results if not r.correct and r not in infra]
    reasons: dict[str, int] = {}
    for r in results:
        if not r.correct:
            reasons[r.reason] = reasons.get(r.reason, 0) + 1
    return {
        "answers": len(pairs),
        "correct": sum(r.correct for r in results),
        "scored_wrong": len(wrong),
        "infra_failures": len(infra),
        "not_correct_reasons": ", ".join(f"{k}={v}" for k, v in sorted(reasons.items())) or "-",
        "call_s_max": max(latencies),
        "call_s_median": statistics.median(latencies),
        "wait_for_worker_s_max": max(waits),
        "wall_s": wall,
    }


def run(quick: bool = False, burners: int | None = None, answers: int | None = None) -> dict:
    quick = quick or os.environ.get("AGENTGYM_PERF_QUICK") == "1"
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    from agentgym.envs.math import get_pool, warm_up

    n = answers or (48 if quick else 200)
    cores = os.cpu_count() or 2
    burners = cores if burners is None else burners
    warm_up()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_burn, daemon=True) for _ in range(burners)]
    for p in procs:
        p.start()
    figures: dict[str, Any] = {"cpu_cores": cores, "burner_processes": burners}
    ratios: dict[str, float] = {}
    try:
        time.sleep(0.5)  # let the burners take the cores
        for i, threads in enumerate((8, 32)):
            res = _grade_all(_answers(n, offset=10_000 * (i + 1) + (os.getpid() % 997)), threads)
            ratios[f"correct_share_{threads}_threads"] = res["correct"] / res["answers"]
            for key, value in res.items():
                figures[f"t{threads}/{key}"] = value
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join(timeout=5)
    pool = get_pool()
    figures["grading_workers_at_start"] = getattr(pool, "size", "?")
    figures["grading_workers_after"] = getattr(pool, "workers", "?")
    figures["grading_workers_max"] = getattr(pool, "max_size", getattr(pool, "size", "?"))
    return {
        "title": "Math grading under load: right answers graded by 8 and 32 threads",
        "ratios": ratios,
        "figures": figures,
        "notes": (
            f"{n} distinct right answers that need sympy, graded through agentgym.envs.math."
            f"grade by 8 and then 32 threads while {burners} CPU burner processes run on "
            f"{cores} cores. infra_failures are answers with no verdict (grader timed out "
            "for lack of CPU, or crashed); the env raises agentgym.InfraError for them, so "
            "they are never scored. scored_wrong counts right answers scored wrong."
        ),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    burners = answers = None
    if "--burners" in argv:
        burners = int(argv[argv.index("--burners") + 1])
    if "--answers" in argv:
        answers = int(argv[argv.index("--answers") + 1])
    result = run(quick="--quick" in argv, burners=burners, answers=answers)
    print(result["title"])
    for name, value in {**result["ratios"], **result["figures"]}.items():
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        print(f"  {name:>36}: {shown}")
    print(f"\n{result['notes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
