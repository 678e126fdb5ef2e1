"""The perf report runner, on a throwaway package of benchmark modules and on the real one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from agentgym.benchmarks.perf.report import discover, split_result

MODULES = {
    "__init__.py": "",
    "good.py": """
        def run(quick=False):
            return {
                "title": "a good one",
                "ratios": {"speedup_x": 2.5 if quick else 1.0},
                "figures": {"items": 3},
                "extra": {"depth": 7},
                "notes": "measured nothing",
            }
    """,
    "plain.py": """
        import os
        if __name__ == "__main__":
            print("plain benchmark says hello, quick=" + os.environ["AGENTGYM_PERF_QUICK"])
    """,
    "broken.py": """
        def run():
            raise RuntimeError("boom in broken")
    """,
    "slow.py": """
        import time
        def run(quick=False):
            time.sleep(60)
            return {}
    """,
    "_helper.py": "X = 1",
}


@pytest.fixture
def fake_perf(tmp_path):
    pkg = tmp_path / "fakeperf"
    pkg.mkdir()
    for name, src in MODULES.items():
        (pkg / name).write_text(textwrap.dedent(src))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    return tmp_path, env


def perf(*args, env):
    return subprocess.run(
        [sys.executable, "-m", "agentgym.benchmarks.perf", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_report_covers_every_kind_of_module(fake_perf):
    tmp, env = fake_perf
    out = tmp / "report.md"
    r = perf("--package", "fakeperf", "--quick", "--timeout", "4", "--out", str(out), env=env)
    assert r.returncode == 1  # one failed and one timed out
    report = out.read_text()
    assert "| good | ok |" in report and "| speedup_x | 2.500 |" in report  # quick=True passed
    assert "| figure | items | 3 |" in report and "| figure | extra/depth | 7 |" in report
    assert "measured nothing" in report and "## good: a good one" in report
    assert "plain benchmark says hello, quick=1" in report  # python -m fallback, stdout kept
    assert "| broken | failed |" in report and "boom in broken" in report
    assert "| slow | timeout |" in report
    assert "_helper" not in report
    assert "## Machine" in report and "| cpu cores |" in report and "| python |" in report


def test_only_selects_modules_and_rejects_unknown_names(fake_perf):
    tmp, env = fake_perf
    out = tmp / "r.md"
    r = perf("--package", "fakeperf", "--only", "good", "--out", str(out), env=env)
    assert r.returncode == 0, r.stderr
    report = out.read_text()
    assert "| speedup_x | 1.000 |" in report and "broken" not in report
    r = perf("--package", "fakeperf", "--only", "nope", "--out", str(out), env=env)
    assert r.returncode == 2 and "nope" in r.stderr


def test_real_perf_suite_has_env_step_and_runs_from_the_cli(tmp_path, cli):
    assert "env_step" in discover()
    out = tmp_path / "perf.md"
    r = cli("bench", "perf", "--quick", "--only", "env_step", "--out", str(out))
    assert r.returncode == 0, r.stderr
    report = out.read_text()
    assert "| env_step | ok |" in report
    assert "rollout_overhead_x" in report and "direct_step_us" in report


def test_split_result_flattens_nested_figures():
    ratios, figures = split_result(
        {"ratios": {"a": 1.5}, "figures": {"b": {"c": 2}}, "d": 3, "title": "t", "notes": "n"}
    )
    assert ratios == {"a": 1.5}
    assert figures == {"b/c": 2, "d": 3}
