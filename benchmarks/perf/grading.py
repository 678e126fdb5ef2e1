"""Grading speed: ``agentgym.envs.math.grade`` vs bare math-verify, and env step overhead.

Pairs (response, gold) are built deterministically:

* **generated**: every kind and level of the BalancedMath generator, half with the
  concise worked solution (right answer), half with the answer replaced by a wrong one;
* **competition-style**: answers as found in MATH-like sets (radicals, expressions,
  intervals, sets, tuples, matrices, percentages, units, choice letters), right and
  wrong, each with a varying number so that no two pairs are identical.

Both graders see the same pairs in the same run. Bare math-verify is the usual call,
``verify(parse(gold), parse(response))`` in the main thread with its default
(signal-based) timeouts; gold is wrapped in ``\\boxed{}`` as it is for ``grade``.
``grade`` runs with its process pool already started (start-up is a one-off cost per
process and is reported separately).

Ratios: ``speedup_vs_math_verify`` = math-verify time / ``grade`` time over all pairs
(above 1: ``grade`` is faster); ``fast_path_speedup`` the same on the pairs ``grade``
decides in-process (numbers, fractions, percentages, lists, intervals, letters: the
ordinary cases); ``symbolic_only_speedup`` on the pairs that need sympy (where ``grade``
runs math-verify itself, in a worker, plus an inter-process round trip).

Agreement by category: a second set of pairs, answers as reasoning models write them
(:mod:`._grading_cases`: several boxes for a multi-part gold, self-correction, hedging,
equivalences that need evaluation, degrees, labels, gold answers with labels or
inequalities, polynomials, fractions, thousands separators, scientific notation,
percentages, units, intervals, matrices, choice letters, text), each with the verdict a
careful reviewer gives. Per category: ``agreement/<category>`` (both graders give the
same verdict), ``agentgym_right/<category>`` and ``math_verify_right/<category>`` (share
of pairs where the grader's verdict is the reviewer's). The notes list every category
where the two disagree and who is right there. ``real_output_speedup`` is the speed
ratio on this set.

Env step overhead: ``agentgym/BalancedMath-v0`` with oracle replies; the time of
``env.step`` minus the grading time it reports (``episode_metrics["grading_time_s"]``).

Run: ``python -m agentgym.benchmarks.perf.grading`` (``--quick`` for a short run).
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import time
from typing import Any

# (gold, right answer, wrong answer) templates; {k} is replaced by a varying integer
_COMPETITION = [
    (
        "\\frac{{\\sqrt{{{k}}}}}{{2}}",
        "\\frac{{1}}{{2}}\\sqrt{{{k}}}",
        "\\frac{{\\sqrt{{{k}}}}}{{3}}",
    ),
    ("{k}\\sqrt{{2}}", "\\sqrt{{{k2x2}}}", "{k}\\sqrt{{3}}"),
    ("x^2+{k}x", "x(x+{k})", "x^2+{k}"),
    ("(x+{k})^2", "x^2+{k2}x+{ksq}", "x^2+{ksq}"),
    ("[{k}, {kp1})", "[{k},{kp1})", "[{k},{kp1}]"),
    ("(-\\infty, {k}]", "(-\\infty,{k}]", "(-\\infty,{k})"),
    ("\\{{{k}, {kp1}\\}}", "\\{{{kp1},{k}\\}}", "\\{{{k}\\}}"),
    ("({k}, {kp1})", "({k},{kp1})", "({kp1},{k})"),
    ("\\frac{{{k}}}{{{kp1}}}", "\\dfrac{{{k}}}{{{kp1}}}", "\\frac{{{kp1}}}{{{k}}}"),
    ("{k}\\%", "{k}", "{kp1}"),
    ("{k}", "{k} \\text{{ cm}}", "{kp1} \\text{{ cm}}"),
    ("{k}\\pi", "\\pi {k}", "{kp1}\\pi"),
    (
        "\\begin{{pmatrix}} {k} & 1 \\\\ 0 & 1 \\end{{pmatrix}}",
        "\\begin{{pmatrix}}{k}&1\\\\0&1\\end{{pmatrix}}",
        "\\begin{{pmatrix}}{k}&0\\\\0&1\\end{{pmatrix}}",
    ),
    ("{k}.5", "\\frac{{{k2p1}}}{{2}}", "{k}.25"),
    ("-{k}", "-{k}", "{k}"),
]


def _pairs(n: int) -> list[tuple[str, str, str]]:
    """``n`` (response, gold, group) pairs; group is "generated" or "competition"."""
    from agentgym.envs.math import KINDS, LEVELS, generate

    out: list[tuple[str, str, str]] = []
    seed = 0
    while len(out) < n // 2:
        for kind in KINDS:
            for level in LEVELS:
                p = generate(seed, level, kind)
                if seed % 2 == 0:
                    out.append((p.concise_solution, p.answer, "generated"))
                else:
                    wrong = p.concise_body + f"\nThe answer is \\boxed{{{p.answer} + 1}}."
                    if p.answer.lstrip("-").isdigit():
                        wrong = p.concise_body + f"\nThe answer is \\boxed{{{int(p.answer) + 1}}}."
                    out.append((wrong, p.answer, "generated"))
        seed += 1
    k = 2
    while len(out) < n:
        for gold_t, right_t, wrong_t in _COMPETITION:
            vals = {
                "k": k,
                "kp1": k + 1,
                "k2": 2 * k,
                "ksq": k * k,
                "k2x2": 2 * k * k,
                "k2p1": 2 * k + 1,
            }
            gold = gold_t.format(**vals)
            answer = (right_t if k % 2 else wrong_t).format(**vals)
            out.append(
                (f"Some reasoning.\nThe answer is $\\boxed{{{answer}}}$.", gold, "competition")
            )
        k += 1
    return out[:n]


def _by_category(
    cases: list[tuple[str, str, str, bool]], ours: list[bool], theirs: list[bool]
) -> tuple[dict[str, float], list[str]]:
    """Per-category figures and one line per category where the graders disagree."""
    figures: dict[str, float] = {}
    lines: list[str] = []
    categories = list(dict.fromkeys(c for _, _, c, _ in cases))
    for cat in categories:
        idx = [i for i, case in enumerate(cases) if case[2] == cat]
        truth = [cases[i][3] for i in idx]
        a = [ours[i] for i in idx]
        m = [theirs[i] for i in idx]
        figures[f"agreement/{cat}"] = sum(x == y for x, y in zip(a, m, strict=True)) / len(idx)
        figures[f"agentgym_right/{cat}"] = sum(x == t for x, t in zip(a, truth, strict=True)) / len(
            idx
        )
        figures[f"math_verify_right/{cat}"] = sum(
            y == t for y, t in zip(m, truth, strict=True)
        ) / len(idx)
        split = [i for i in idx if ours[i] != theirs[i]]
        if split:
            ag = sum(ours[i] == cases[i][3] for i in split)
            lines.append(
                f"{cat}: {len(split)} of {len(idx)} disagree; agentgym right on {ag}, "
                f"math-verify on {len(split) - ag}"
            )
    return figures, lines


def _time_grade(pairs: list[tuple[str, str, str]]) -> tuple[list[float], list[bool], list[str]]:
    from agentgym.envs.math import grade

    times, verdicts, methods = [], [], []
    for response, gold, _ in pairs:
        t = time.perf_counter()
        r = grade(response, gold)
        times.append(time.perf_counter() - t)
        verdicts.append(r.correct)
        methods.append(r.method)
    return times, verdicts, methods


def _time_math_verify(pairs: list[tuple[str, str, str]]) -> tuple[list[float], list[bool]]:
    from math_verify import parse, verify

    times, verdicts = [], []
    for response, gold, _ in pairs:
        t = time.perf_counter()
        ok = verify(parse("\\boxed{" + gold + "}"), parse(response))
        times.append(time.perf_counter() - t)
        verdicts.append(bool(ok))
    return times, verdicts


def _env_step_overhead(episodes: int) -> dict[str, float]:
    """Time ``reset`` and the one ``step`` of ``episodes`` BalancedMath episodes.

    The env is the bare one under ``gym.make``'s wrappers (``.unwrapped``), as in a
    rollout's inner loop; the oracle's reply (:class:`agentgym.OraclePolicy`) is made
    before the clock starts, so only the env's own work is timed.
    """
    import asyncio

    import gymnasium as gym

    from agentgym import OraclePolicy, SamplingParams

    env = gym.make("agentgym/BalancedMath-v0").unwrapped
    oracle = OraclePolicy().for_env(env)
    sampling = SamplingParams()
    loop = asyncio.new_event_loop()
    step_s, grade_s, reset_s = [], [], []
    try:
        for seed in range(episodes):
            t = time.perf_counter()
            obs, _ = env.reset(seed=seed)
            reset_s.append(time.perf_counter() - t)
            action = loop.run_until_complete(oracle(obs, sampling)).text
            t = time.perf_counter()
            env.step(action)
            step_s.append(time.perf_counter() - t)
            grade_s.append(env.episode_metrics["grading_time_s"])
    finally:
        loop.close()
        env.close()
    overhead = [s - g for s, g in zip(step_s, grade_s, strict=True)]
    return {
        "env_step_us_median": 1e6 * statistics.median(step_s),
        "env_grading_us_median": 1e6 * statistics.median(grade_s),
        "env_step_overhead_excl_grading_us_median": 1e6 * statistics.median(overhead),
        "env_step_overhead_excl_grading_us_mean": 1e6 * statistics.fmean(overhead),
        "env_reset_us_median": 1e6 * statistics.median(reset_s),
    }


def run(quick: bool = False) -> dict[str, Any]:
    from agentgym.benchmarks.perf._grading_cases import real_output_pairs

    quick = quick or os.environ.get("AGENTGYM_PERF_QUICK") == "1"
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    from agentgym.envs.math import get_pool, warm_up

    n = 400 if quick else 3000
    pairs = _pairs(n)
    t = time.perf_counter()
    warm_up()
    startup_s = time.perf_counter() - t

    g_times, g_verdicts, methods = _time_grade(pairs)
    m_times, m_verdicts = _time_math_verify(pairs)
    symbolic = [i for i, m in enumerate(methods) if m == "symbolic"]
    agree = sum(a == b for a, b in zip(g_verdicts, m_verdicts, strict=True)) / len(pairs)
    g_total, m_total = sum(g_times), sum(m_times)
    g_sym = sum(g_times[i] for i in symbolic)
    m_sym = sum(m_times[i] for i in symbolic)
    g_fast, m_fast = g_total - g_sym, m_total - m_sym
    figures: dict[str, Any] = {
        "pairs": len(pairs),
        "grading_workers": get_pool().size,
        "grade_us_mean": 1e6 * g_total / len(pairs),
        "grade_us_median": 1e6 * statistics.median(g_times),
        "grade_ms_max": 1e3 * max(g_times),
        "math_verify_us_mean": 1e6 * m_total / len(pairs),
        "math_verify_us_median": 1e6 * statistics.median(m_times),
        "math_verify_ms_max": 1e3 * max(m_times),
        "symbolic_share": len(symbolic) / len(pairs),
        "grade_symbolic_us_mean": 1e6 * g_sym / max(1, len(symbolic)),
        "math_verify_symbolic_us_mean": 1e6 * m_sym / max(1, len(symbolic)),
        "verdict_agreement": agree,
        "pool_startup_s": startup_s,
    }
    for group in ("generated", "competition"):
        idx = [i for i, p in enumerate(pairs) if p[2] == group]
        figures[f"agreement/{group}"] = sum(g_verdicts[i] == m_verdicts[i] for i in idx) / len(idx)

    cases = real_output_pairs(2 if quick else 8)
    case_pairs = [(r, g, c) for r, g, c, _ in cases]
    rg_times, rg_verdicts, _ = _time_grade(case_pairs)
    rm_times, rm_verdicts = _time_math_verify(case_pairs)
    by_cat, disagreements = _by_category(cases, rg_verdicts, rm_verdicts)
    figures["real_output_pairs"] = len(cases)
    figures["real_output_agentgym_right"] = sum(
        v == c[3] for v, c in zip(rg_verdicts, cases, strict=True)
    ) / len(cases)
    figures["real_output_math_verify_right"] = sum(
        v == c[3] for v, c in zip(rm_verdicts, cases, strict=True)
    ) / len(cases)
    figures.update(by_cat)
    figures.update(_env_step_overhead(50 if quick else 300))
    disagree = "; ".join(disagreements) or "none"
    return {
        "title": "Math grading: agentgym grade vs bare math-verify; BalancedMath step overhead",
        "ratios": {
            "speedup_vs_math_verify": m_total / g_total,
            "fast_path_speedup": (m_fast / g_fast) if g_fast else float("nan"),
            "symbolic_only_speedup": (m_sym / g_sym) if g_sym else float("nan"),
            "real_output_speedup": sum(rm_times) / sum(rg_times),
        },
        "figures": figures,
        "notes": (
            f"{len(pairs)} pairs (half generator solutions right/wrong, half competition-style "
            "answers right/wrong), graded by both in the same process, one call at a time. "
            "grade's worker pool was started beforehand (pool_startup_s). verdict_agreement "
            f"is the share of pairs where both graders agree. {len(cases)} real-output-style "
            "pairs by category, each with a reviewer's verdict (agentgym_right/..., "
            f"math_verify_right/...). Categories where the two disagree: {disagree}."
        ),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    result = run(quick="--quick" in argv)
    print(result["title"])
    for name, value in {**result["ratios"], **result["figures"]}.items():
        print(
            f"  {name:>42}: {value:.4g}" if isinstance(value, float) else f"  {name:>42}: {value}"
        )
    print(f"\n{result['notes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
