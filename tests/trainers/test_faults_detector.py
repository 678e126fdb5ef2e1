"""The fault detector's arithmetic, by hand: rates, drift from peers, hung/stuck/broken,
persistence, and the pieces around it (the lock, process trees, the collective clock).

Every number below is worked out in the comment next to it.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import pytest

from agentgym.health import (
    HIGH_BAD,
    LOW_BAD,
    RANK_RULES,
    WORKER_RULES,
    CollectiveClock,
    Detector,
    DetectorSettings,
    IntervalTotal,
    MetricRule,
    RunLock,
    RunLockedError,
    Sample,
    broken,
    drift,
    drifting,
    peer_median,
    read_owner,
    stale,
    stuck,
    window_rates,
)
from agentgym.health.procs import alive, descendants, kill_tree, proc_state


def _sample(t, worker="rank0", **counters_and_gauges):
    gauges = {k[2:]: v for k, v in counters_and_gauges.items() if k.startswith("g_")}
    counters = {k: v for k, v in counters_and_gauges.items() if not k.startswith("g_")}
    return Sample(worker=worker, t=t, counters=counters, gauges=gauges)


# ----------------------------------------------------------------------------- rates
def test_window_rates_are_changes_over_the_window():
    first = _sample(100.0, cpu_s=1.0, collective_s=0.0, tokens=0, gen_s=0.0, errors=0, g_rss_mb=9)
    mid = _sample(105.0, cpu_s=3.0, collective_s=1.0, tokens=100, gen_s=1.0, errors=1)
    last = _sample(110.0, cpu_s=6.0, collective_s=4.0, tokens=300, gen_s=2.0, errors=2, g_rss_mb=7)
    r = window_rates([first, mid, last])
    assert r["window_s"] == 10.0
    assert r["cpu_share"] == pytest.approx(0.5)  # (6 - 1) / 10
    assert r["wait_share"] == pytest.approx(0.4)  # (4 - 0) / 10
    assert r["tokens_per_gen_s"] == pytest.approx(150.0)  # 300 tokens / 2 s generating
    assert r["errors"] == 2
    assert r["rss_mb"] == 7  # gauges: the last sample's


def test_a_rate_needs_its_denominator_to_move():
    a = _sample(0.0, tokens=0, gen_s=0.0, busy_s=0.0, calls=0)
    b = _sample(10.0, tokens=5, gen_s=0.04, busy_s=3.0, calls=1)  # 0.04 s <= 0.05; 1 call <= 1
    r = window_rates([a, b])
    assert "tokens_per_gen_s" not in r and "call_s" not in r
    c = _sample(10.0, tokens=5, gen_s=0.5, busy_s=3.0, calls=4)
    r = window_rates([a, c])
    assert r["tokens_per_gen_s"] == pytest.approx(10.0)  # 5 / 0.5
    assert r["call_s"] == pytest.approx(0.75)  # 3 s / 4 calls
    assert window_rates([a]) == {}  # one sample: no rate (and no gauges here)


# ----------------------------------------------------------------------------- drift
def test_peer_median_leaves_the_worker_out():
    values = {"a": 1.0, "b": 2.0, "c": 10.0}
    assert peer_median(values, "a") == 6.0  # median(2, 10)
    assert peer_median(values, "c") == 1.5  # median(1, 2)
    assert peer_median({"a": 1.0}, "a") is None


def test_drift_flags_only_the_worker_worse_than_its_peers():
    rule = MetricRule("step_s", HIGH_BAD, min_gap=0.5)
    got = drift({"a": 1.0, "b": 1.1, "c": 3.3}, rule, factor=2.0)
    assert list(got) == ["c"]
    d = got["c"]
    assert d.peers == pytest.approx(1.05)  # median(1.0, 1.1)
    assert d.ratio == pytest.approx(3.3 / 1.05)  # 3.142...
    # a and b: their peers' medians are 2.15 and 2.2, they are better, not worse
    assert "3.1x higher" in d.describe()


def test_drift_with_two_workers_picks_the_one_in_the_bad_direction():
    rule = MetricRule("wait_share", LOW_BAD, min_gap=0.1)
    got = drift({"rank0": 0.4, "rank1": 0.05}, rule, factor=2.0)
    assert list(got) == ["rank1"]  # the others wait for it: it waits least
    assert got["rank1"].ratio == pytest.approx(8.0)  # 0.4 / 0.05
    assert got["rank1"].peers == 0.4


def test_small_gaps_are_noise_whatever_the_ratio():
    rule = MetricRule("wait_share", LOW_BAD, min_gap=0.1)
    assert drift({"a": 0.02, "b": 0.001}, rule, factor=2.0) == {}  # 20x, but 0.019 apart
    zero = drift({"a": 0.5, "b": 0.0}, rule, factor=2.0)
    assert zero["b"].ratio == math.inf and "(far lower)" in zero["b"].describe()


def test_drifting_collects_every_metric_of_a_straggler():
    rates = {
        "rank0": {"wait_share": 0.45, "demand_share": 0.2, "tokens_per_gen_s": 420.0},
        "rank1": {"wait_share": 0.02, "demand_share": 1.9, "tokens_per_gen_s": 110.0},
    }
    got = drifting(rates, RANK_RULES, factor=2.0)
    assert list(got) == ["rank1"]
    assert [d.metric for d in got["rank1"]] == ["wait_share", "demand_share", "tokens_per_gen_s"]
    # 0.45 / 0.02 = 22.5; 1.9 / 0.2 = 9.5; 420 / 110 = 3.82
    assert [round(d.ratio, 2) for d in got["rank1"]] == [22.5, 9.5, 3.82]


def test_a_slow_ray_worker_drifts_on_call_time_and_its_oldest_call():
    rates = {
        "worker0": {"call_s": 0.10, "oldest_call_s": 0.3, "rss_mb": 300.0},
        "worker1": {"call_s": 0.12, "oldest_call_s": 0.2, "rss_mb": 310.0},
        "worker2": {"call_s": 0.90, "oldest_call_s": 6.0, "rss_mb": 320.0},
    }
    got = drifting(rates, WORKER_RULES, factor=2.0)
    assert list(got) == ["worker2"]
    # peers' medians: call_s median(0.10, 0.12) = 0.11 -> 0.9 / 0.11 = 8.18;
    # oldest_call_s median(0.3, 0.2) = 0.25 -> 6.0 / 0.25 = 24 (gap 5.75 >= 2 s)
    assert [(d.metric, round(d.ratio, 2)) for d in got["worker2"]] == [
        ("call_s", 8.18),
        ("oldest_call_s", 24.0),
    ]


# ----------------------------------------------------------------------------- judges
def test_stale_stuck_and_broken():
    assert stale({"rank0": 0.5, "rank1": 12.0}, 10.0) == {"rank1": 12.0}
    rates = {
        "rank0": {"cpu_share": 0.3, "collective_wait_s": 130.0, "window_s": 120.0},
        "rank1": {"cpu_share": 0.01, "collective_wait_s": 0.0, "window_s": 120.0},
    }
    why = stuck(rates, 120.0)
    assert list(why) == ["rank1"] and "rank0 waits in a collective for 130 s" in why["rank1"]
    rates["rank1"]["window_s"] = 30.0  # not watched long enough to say
    assert stuck(rates, 120.0) == {}
    errors = {"w0": {"errors": 5.0}, "w1": {"errors": 0.0}, "w2": {"errors": 1.0}}
    # w0: 5 errors, its peers' median 0.5, and 5 - 0.5 >= 3
    assert list(broken(errors, 3)) == ["w0"]
    assert broken({w: {"errors": 5.0} for w in ("w0", "w1", "w2")}, 3) == {}  # the env's fault
    assert "non-finite" in broken({"rank0": {"nonfinite": 1.0}}, 3)["rank0"]


# ----------------------------------------------------------------------------- detector
def _record(worker, seq, t, *, pid=None, **fields):
    return {
        "worker": worker,
        "host": "h",
        "pid": pid or (100 + int(worker[-1])),
        "started": 1.0,
        "seq": seq,
        "t": t,
        "step": 3,
        "phase": "rollout",
        **fields,
    }


def test_a_worker_without_new_heartbeats_is_hung_once():
    det = Detector(DetectorSettings(hung_after_s=10.0), RANK_RULES)
    faults = []
    for now in range(0, 20):
        recs = {"rank0": _record("rank0", now, float(now))}
        if now <= 5:  # rank1 stops after its heartbeat at t=5
            recs["rank1"] = _record("rank1", now, float(now))
        else:
            recs["rank1"] = _record("rank1", 5, 5.0)  # the same record again
        faults += [(now, f) for f in det.update(float(now), recs)]
    assert [(now, f.kind, f.worker) for now, f in faults] == [(15, "hung", "rank1")]
    f = faults[0][1]
    assert f.host == "h" and f.pid == 101 and f.step == 3 and f.phase == "rollout"
    assert "no heartbeat for 10.0 s" in f.message() and "rank1 on host h (pid 101)" in f.message()
    # it beats again: recovered, and a new hang would be reported again
    assert det.update(20.0, {"rank1": _record("rank1", 6, 20.0)}) == []


def test_a_worker_that_said_done_is_not_hung_and_a_restart_starts_afresh():
    det = Detector(DetectorSettings(hung_after_s=2.0), RANK_RULES)
    det.update(0.0, {"rank0": _record("rank0", 1, 0.0, done=True)})
    assert det.update(50.0, {}) == []
    det.update(50.0, {"rank1": _record("rank1", 1, 0.0)})
    # rank1 restarted in place (new pid): its history starts again, no hang yet
    assert det.update(51.5, {"rank1": _record("rank1", 1, 0.0, pid=999)}) == []
    assert [f.pid for f in det.update(53.6, {})] == [999]


def test_a_straggler_is_named_only_after_its_drift_persists():
    settings = DetectorSettings(window_s=5.0, persist_s=4.0, slow_factor=2.0, min_metrics=2)
    det = Detector(settings, RANK_RULES)
    totals = {w: {"collective_s": 0.0, "demand_s": 0.0, "tokens": 0.0, "gen_s": 0.0}
              for w in ("rank0", "rank1")}  # fmt: skip
    found = []
    for now in range(0, 14):
        slow = now > 5  # from the second (5, 6] on, rank1 straggles
        if now > 0:  # what each rank did in the second that just ended
            per_s = {
                "rank0": (0.4 if slow else 0.2, 0.3, 300.0),
                "rank1": (0.02 if slow else 0.2, 1.5 if slow else 0.3, 100.0 if slow else 300.0),
            }
            for w, (wait, demand, tokens) in per_s.items():
                totals[w]["collective_s"] += wait
                totals[w]["demand_s"] += demand
                totals[w]["tokens"] += tokens
                totals[w]["gen_s"] += 1.0
        recs = {
            w: _record(w, now, float(now), counters=dict(c), gauges={}) for w, c in totals.items()
        }
        found += [(now, f) for f in det.update(float(now), recs)]
    # the window holds the last 5 seconds. At t=6 (one slow second): rank1 waits
    # (0.02 + 4 * 0.2) / 5 = 0.164 vs rank0's (0.4 + 0.8) / 5 = 0.24 (1.5x: no drift).
    # At t=7: wait 0.128 vs 0.28 (2.19x, gap 0.15) and demand (3.0 + 0.9) / 5 = 0.78 vs
    # 0.3 (2.6x): two metrics, the drift starts; it must last 4 s: reported at t=11,
    # when the window is all slow: 0.02 vs 0.4, 1.5 vs 0.3 and 100 vs 300 tokens/s.
    assert [(now, f.kind, f.worker) for now, f in found] == [(11, "slow", "rank1")]
    fault = found[0][1]
    assert set(fault.evidence) == {"wait_share", "demand_share", "tokens_per_gen_s"}
    assert fault.evidence["wait_share"]["ratio"] == pytest.approx(20.0)
    assert fault.evidence["demand_share"]["ratio"] == pytest.approx(5.0)
    assert fault.evidence["tokens_per_gen_s"]["ratio"] == pytest.approx(3.0)
    assert "for 4 s it drifted from its peers on 3 metrics" in fault.reason


def test_one_noisy_look_does_not_make_a_straggler():
    settings = DetectorSettings(window_s=2.0, persist_s=3.0, min_metrics=2)
    det = Detector(settings, RANK_RULES)
    faults = []
    for now in range(0, 12):
        recs = {
            w: _record(w, now, float(now), gauges={"rss_mb": 500.0, "step_compute_s": 1.0})
            for w in ("rank0", "rank1")
        }
        if now in (4, 8):  # two isolated bad seconds of rank1 (2 metrics drift in each)
            recs["rank1"]["gauges"] = {"rss_mb": 1e6, "step_compute_s": 100.0}
        faults += det.update(float(now), recs)
    assert faults == []


# ----------------------------------------------------------------------------- pieces
def test_collective_clock_counts_the_wait_in_progress():
    clock = CollectiveClock()
    with clock.track("all_gather"):
        time.sleep(0.05)
        total, op, wait = clock.snapshot()
        assert op == "all_gather" and wait >= 0.05 and total >= 0.05
    total, op, wait = clock.snapshot()
    assert op == "" and wait == 0.0 and total >= 0.05 and clock.last_name == "all_gather"


def test_interval_total_sums_new_intervals_and_survives_a_clear():
    busy = [(0.0, 1.0), (2.0, 2.5)]
    total = IntervalTotal(busy)
    assert total() == 1.5
    busy.append((3.0, 4.0))
    assert total() == 2.5
    busy.clear()
    busy.append((5.0, 5.25))
    assert total() == 2.75


def test_the_run_lock_names_its_holder_and_dies_with_it(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from agentgym.health import RunLock\n"
            f"RunLock({str(tmp_path)!r}).acquire(role='holder test')\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        owner = read_owner(tmp_path / "run.lock")
        assert owner["pid"] == holder.pid and owner["role"] == "holder test"
        with pytest.raises(RunLockedError, match=rf"pid {holder.pid} on host .*kill {holder.pid}"):
            RunLock(tmp_path).acquire()
        # a one-process trainer is refused before it builds anything
        from agentgym import load_config
        from agentgym.trainers.config import TrainConfig
        from agentgym.trainers.loop import DAPOTrainer

        cfg = load_config(TrainConfig, None, [f"run.output_dir={tmp_path}"])
        with pytest.raises(RunLockedError, match="holder test"):
            DAPOTrainer(cfg)
        assert not (tmp_path / "config.yaml").exists()
    finally:
        holder.kill()  # SIGKILL: no clean-up ran, the kernel dropped the lock
        holder.wait()
    lock = RunLock(tmp_path).acquire()
    again = RunLock(tmp_path).acquire()  # re-entrant within one process
    again.release()
    lock.release()
    assert read_owner(tmp_path / "run.lock")["pid"] == os.getpid()


def test_kill_tree_ends_a_stopped_process_tree():
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time\n"
         "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
         "time.sleep(60)\n"]
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not descendants(parent.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        (child,) = descendants(parent.pid)
        os.kill(child, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while "T (stopped)" not in proc_state(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "T (stopped)" in proc_state(child)
        kill_tree([parent.pid, child], grace_s=2.0)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 5
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child)
    finally:
        parent.kill()


def test_one_alive_for_the_health_checks_the_sandbox_and_the_reaper(tmp_path):
    """``agentgym.health.alive`` is the project's one "is this pid alive": the sandbox's
    owner check and the Ray reaper use it, and a zombie counts as gone for all three."""
    from agentgym.health import alive as public_alive
    from agentgym.sandbox.procfs import owner_alive, process_start_ticks
    from agentgym.workers import reaper

    assert public_alive is alive and reaper.alive is alive
    me = os.getpid()
    assert alive(me) and owner_alive(me, process_start_ticks(me))
    assert not owner_alive(me, "1")  # same pid, another start time: a reused pid
    assert not alive(0) and not owner_alive(-1)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 20
    while alive(zombie.pid) and time.monotonic() < deadline:
        time.sleep(0.02)  # exited, not yet reaped: a zombie
    assert not alive(zombie.pid) and not owner_alive(zombie.pid)
    zombie.wait()
    # the reaper as start_reaper runs it (python -I -S: no site-packages) loads the same
    # helper by path; its driver is gone, so it removes the session folder and exits
    session = tmp_path / "session"
    session.mkdir()
    script = [sys.executable, "-I", "-S", reaper.__file__, "0", str(zombie.pid), str(session)]
    done = subprocess.run(
        [*script, "0"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert not session.exists()


def test_the_health_section_is_the_detectors_settings_plus_its_own():
    """Each detector knob and its default is written once, in DetectorSettings; the
    trainer's ``health`` section holds them (flat keys, as users write them)."""
    from dataclasses import fields

    from agentgym import load_config
    from agentgym.trainers.config import HealthConfig, TrainConfig

    knobs = [f.name for f in fields(DetectorSettings)]
    assert [f.name for f in fields(HealthConfig)][: len(knobs)] == knobs
    assert HealthConfig().detector_settings() == DetectorSettings()
    cfg = load_config(TrainConfig, None, ["health.hung_after_s=4", "health.max_errors=5"])
    assert cfg.health.detector_settings() == DetectorSettings(hung_after_s=4.0, max_errors=5)
    assert type(cfg.health.detector_settings()) is DetectorSettings
