"""Measurements for docs/reliability.md (opt-in: they take minutes and, for a slow rank,
need root to put the rank into a CPU-quota cgroup).

    AGENTGYM_MEASURE_FAULTS=5 .venv/bin/python -m pytest -p no:cacheprovider -s \\
        tests/trainers/test_faults_measure.py

runs each measurement that many times with the default detector settings and prints
the median (and each run) of:

* ``hung``: SIGSTOP of rank 1 of a 2-process run -> the launcher names it;
* ``slow``: rank 1 moved into a cgroup with a CPU quota of ``AGENTGYM_MEASURE_QUOTA``
  (default 5%) of one CPU -> the launcher names it (skipped without a writable cgroup);
* ``heartbeat gaps``: the longest time between two heartbeats of a healthy rank;
* ``restart``: steps redone and seconds from the fault to the first resumed step.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
from pathlib import Path

import pytest
from test_faults_chaos import _args, _heartbeat, _launch, _log, _rows, _steps

RUNS = int(os.environ.get("AGENTGYM_MEASURE_FAULTS", "0") or 0)
QUOTA = float(os.environ.get("AGENTGYM_MEASURE_QUOTA", "0.05"))

pytestmark = pytest.mark.skipif(RUNS < 1, reason="set AGENTGYM_MEASURE_FAULTS=N to measure")


def _report(name: str, values: list[float], unit: str = "s") -> None:
    each = ", ".join(f"{v:.1f}" for v in values)
    print(f"\n[measure] {name}: median {statistics.median(values):.1f} {unit} ({each})")


def _detected_after(out: Path, injected: float, kind: str) -> float:
    faults = [r for r in _rows(out) if r["event"] == "fault" and r["kind"] == kind]
    assert faults, _log(out)[-3000:]
    assert faults[0]["worker"] == "rank1"
    return faults[0]["time"] - injected


def test_measure_hung_rank_detection(tmp_path):
    times = []
    for i in range(RUNS):
        out = tmp_path / f"hung{i}"
        proc = _launch(out, _args(out, 400, "distributed.on_fault=stop"))
        try:
            pid = _heartbeat(out, 1, min_step=2)["pid"]
            os.kill(pid, signal.SIGSTOP)
            injected = time.time()
            proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
        times.append(_detected_after(out, injected, "hung"))
    _report("hung rank (SIGSTOP) named after", times)


def _cgroup(name: str) -> tuple[Path, Path] | None:
    """A CPU-quota cgroup (v1 or v2): (its folder, the file that moves a process into it)."""
    v1 = Path("/sys/fs/cgroup/cpu")
    try:
        if (v1 / "cpu.cfs_quota_us").exists():
            d = v1 / name
            d.mkdir(exist_ok=True)
            (d / "cpu.cfs_period_us").write_text("100000")
            (d / "cpu.cfs_quota_us").write_text(str(int(QUOTA * 100000)))
            return d, v1 / "cgroup.procs"
        v2 = Path("/sys/fs/cgroup")
        if (v2 / "cgroup.controllers").exists():
            d = v2 / name
            d.mkdir(exist_ok=True)
            (d / "cpu.max").write_text(f"{int(QUOTA * 100000)} 100000")
            return d, v2 / "cgroup.procs"
    except OSError:
        return None
    return None


def test_measure_slow_rank_detection(tmp_path):
    group = _cgroup(f"agentgym-measure-{os.getpid()}")
    if group is None:
        pytest.skip("no writable CPU cgroup (needs root)")
    folder, root_procs = group
    times = []
    try:
        for i in range(RUNS):
            out = tmp_path / f"slow{i}"
            args = _args(out, 1000, "distributed.on_fault=stop", "run.save_every=10")
            proc = _launch(out, args)
            try:
                pid = _heartbeat(out, 1, min_step=2)["pid"]
                (folder / "cgroup.procs").write_text(str(pid))
                injected = time.time()
                proc.wait(timeout=600)
            finally:
                if proc.poll() is None:
                    proc.kill()
            times.append(_detected_after(out, injected, "slow"))
            assert "stopped after step" in _log(out)
    finally:
        for p in (folder / "cgroup.procs").read_text().split():
            root_procs.write_text(p)
        folder.rmdir()
    _report(f"slow rank ({QUOTA:.0%} of a CPU) named after", times)


def test_measure_heartbeat_gaps_and_false_alarms(tmp_path):
    gaps = []
    for i in range(RUNS):
        out = tmp_path / f"gaps{i}"
        proc = _launch(out, _args(out, 60))
        seen: dict[str, tuple[int, float]] = {}
        worst = 0.0
        try:
            while proc.poll() is None:
                for path in (out / "health").glob("rank*.json"):
                    try:
                        rec = json.loads(path.read_text())
                    except (OSError, ValueError):
                        continue
                    if rec.get("done"):
                        continue
                    seq, at = seen.get(rec["worker"], (-1, time.monotonic()))
                    if rec["seq"] != seq:
                        if seq >= 0:
                            worst = max(worst, time.monotonic() - at)
                        seen[rec["worker"]] = (rec["seq"], time.monotonic())
                time.sleep(0.05)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, _log(out)[-3000:]
        assert [r for r in _rows(out) if r["event"] == "fault"] == []  # no false alarm
        gaps.append(worst)
    _report("longest gap between two heartbeats of a healthy rank", gaps)


def test_measure_restart_cost(tmp_path):
    redone, seconds = [], []
    for i in range(RUNS):
        out = tmp_path / f"restart{i}"
        proc = _launch(out, _args(out, 20, "health.hung_after_s=5"), "--max-restarts", "1")
        try:
            pid = _heartbeat(out, 1, min_step=3)["pid"]
            done_before = json.loads((out / "health" / "rank0.json").read_text())["step"]
            os.kill(pid, signal.SIGSTOP)
            injected = time.time()
            while proc.poll() is None:  # the first step done after the restart
                rows = [r for r in _rows(out) if r["event"] == "restart"]
                rec = json.loads((out / "health" / "rank0.json").read_text() or "{}")
                if (
                    rows
                    and rec.get("started", 0) > injected
                    and rec["step"] > rows[0]["resume_step"]
                ):
                    seconds.append(time.time() - injected)
                    redone.append(max(0, done_before - rows[0]["resume_step"]))
                    break
                time.sleep(0.05)
            proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert _steps(out) == list(range(1, 21))
    _report("steps redone after a restart (run.save_every=1)", [float(x) for x in redone], "steps")
    _report("from the fault to the first resumed step", seconds)


def test_measure_killed_rank_end(tmp_path):
    ends = []
    for i in range(RUNS):
        out = tmp_path / f"killed{i}"
        proc = _launch(out, _args(out, 400))
        try:
            pid = _heartbeat(out, 1, min_step=2)["pid"]
            os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
            proc.wait(timeout=120)
            ends.append(time.monotonic() - killed)
        finally:
            if proc.poll() is None:
                proc.kill()
    _report("SIGKILL of rank 1 to the end of the launcher", ends)
