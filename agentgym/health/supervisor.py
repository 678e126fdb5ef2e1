"""The launcher of ``agentgym train --nproc N``: start the ranks, watch them, act.

:func:`supervise` runs in the process the user started. It launches the ranks' own
launcher ("torchrun" below: torchrun on several nodes, :mod:`agentgym.cli.local_ranks`
on one, which behaves as torchrun does in all that follows), reads the ranks' heartbeat files every ``heartbeat_s``, feeds them to
a :class:`~agentgym.health.detector.Detector`, and, on a fault:

1. reports it: one line on stderr naming the rank, host, pid and the metrics that gave
   it away; a row in ``<run>/faults.jsonl``; a dump in ``<run>/faults/`` with the Python
   stacks of this node's ranks (faulthandler, on SIGUSR2) or, for a stopped process, its
   ``/proc`` state;
2. acts on ``distributed.on_fault``: ``warn`` goes on; ``stop`` and ``restart`` stop the
   ranks: a slow or broken rank is asked to stop at the end of the step (every rank saves
   a checkpoint first, so the state is consistent), a hung one is killed at once (its
   state cannot be saved; the last checkpoint stays);
3. with ``restart`` (and after any failure of the ranks: a crash, a lost rank), relaunches
   with ``--resume`` while restarts remain (``--max-restarts``), losing at most the steps
   since the last checkpoint.

torchrun gets SIGTERM when the launcher dies (``PR_SET_PDEATHSIG``) and the ranks get
SIGKILL when torchrun dies, so a kill -9 of the launcher leaves nothing behind.

Ctrl-C and SIGTERM reach the launcher only (torchrun runs in a session of its own): the
launcher passes the first one on to each rank once, so that every rank finishes the step,
saves a checkpoint and stops (torchrun would have passed on a second signal, which stops
a rank at once, and killed the ranks 30 s later); a second one stops everything now. A
rank that stops on a configuration error (exit status 2, its message above) is neither
restarted nor offered ``--resume``: the run never started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.health.detector import Detector, DetectorSettings, Fault
from agentgym.health.dumps import capture_many, write_dump
from agentgym.health.heartbeat import (
    EXIT_STOPPED,
    HEALTH_DIR,
    STACKS_SIGNAL,
    STOP_FILE,
)
from agentgym.health.lock import LAUNCHER_ENV
from agentgym.health.procs import children, descendants, kill_tree, pdeathsig_preexec
from agentgym.health.scoring import RANK_RULES

FAULTS_FILE = "faults.jsonl"
#: a rank's exit status on a configuration error (the CLI's usage status)
EXIT_CONFIG = 2
ON_FAULT = ("warn", "stop", "restart")


@dataclass
class LaunchPlan:
    """What :func:`supervise` runs and how it reacts.

    Attributes:
        command: the torchrun command of the first launch.
        resume_command: the command of a relaunch (the same with ``--resume``).
        run_dir: ``run.output_dir`` (heartbeats, faults, checkpoints).
        settings: the detector's knobs.
        heartbeat_s: how often the ranks beat (and the launcher looks).
        on_fault: ``warn``, ``stop`` or ``restart``.
        max_restarts: relaunches allowed after failures.
        stop_grace_s: how long stopping ranks may take to checkpoint and exit before
            they are killed.
        detect: run the detector (off: only restarts after failures).
    """

    command: list[str]
    resume_command: list[str]
    run_dir: Path
    settings: DetectorSettings = field(default_factory=DetectorSettings)
    heartbeat_s: float = 1.0
    on_fault: str = "restart"
    max_restarts: int = 0
    stop_grace_s: float = 120.0
    detect: bool = True


@dataclass
class Attempt:
    """How one launch of torchrun ended."""

    rc: int
    fault: Fault | None = None
    seconds: float = 0.0
    #: the SIGINT / SIGTERM the launcher passed on to the ranks (0: none)
    signum: int = 0


def say(text: str) -> None:
    print(f"[agentgym train] {text}", file=sys.stderr, flush=True)


def supervise(plan: LaunchPlan) -> int:
    """Launch, watch and relaunch (see the module docstring); returns the exit status:
    0 when the run finished, :data:`EXIT_STOPPED` when a fault stopped it, 128 + the
    signal after a Ctrl-C / SIGTERM, :data:`EXIT_CONFIG` when the ranks refused the
    config, torchrun's status after a failure with no restart left."""
    if plan.on_fault not in ON_FAULT:
        raise ValueError(f"on_fault must be one of {ON_FAULT}, got {plan.on_fault!r}")
    command, restarts = plan.command, 0
    while True:
        attempt = run_once(command, plan, restarts)
        if attempt.rc == 0:
            return 0
        if attempt.rc == EXIT_CONFIG and attempt.fault is None:
            return EXIT_CONFIG  # the ranks said what is wrong; nothing ran
        fault = attempt.fault
        last = latest_step(plan.run_dir)
        kept = f"the last checkpoint (step {last}) stays" if last else "no checkpoint yet"
        if attempt.signum:
            name = signal.Signals(attempt.signum).name
            say(f"stopped on {name}; {kept}. Continue with the same command plus --resume.")
            return 128 + attempt.signum
        if fault is not None and plan.on_fault == "stop":
            say(
                f"stopped: {fault.worker} {fault.kind}; {kept}. Continue with the same "
                "command plus --resume."
            )
            return EXIT_STOPPED
        if restarts >= plan.max_restarts:
            what = f"{fault.worker} {fault.kind}" if fault else f"exit status {attempt.rc}"
            hint = "" if plan.max_restarts else " (--max-restarts K relaunches automatically)"
            say(f"the run failed ({what}); {kept}; add --resume to continue{hint}.")
            return EXIT_STOPPED if fault is not None else attempt.rc
        restarts += 1
        cause = f"{fault.worker} {fault.kind}" if fault else f"exit status {attempt.rc}"
        say(
            f"restart {restarts}/{plan.max_restarts} after {cause}: resuming from "
            + (f"the checkpoint of step {last}" if last else "the start (no checkpoint yet)")
        )
        _append(
            plan.run_dir,
            {"event": "restart", "restart": restarts, "cause": cause, "resume_step": last},
        )
        command = plan.resume_command


def run_once(command: Sequence[str], plan: LaunchPlan, restarts: int = 0) -> Attempt:
    """One launch of torchrun, watched until it exits (or is stopped on a fault)."""
    health = plan.run_dir / HEALTH_DIR
    health.mkdir(parents=True, exist_ok=True)
    (health / STOP_FILE).unlink(missing_ok=True)
    old = {path.name: _identity(rec) for path, rec in _records(health)}
    env = dict(os.environ)
    env[LAUNCHER_ENV] = str(os.getpid())
    t0 = time.monotonic()
    say("launching: " + " ".join(command[1:]))
    proc = subprocess.Popen(
        list(command),
        env=env,
        preexec_fn=pdeathsig_preexec(signal.SIGTERM),
        start_new_session=True,  # a Ctrl-C reaches the launcher, which passes it on once
    )
    signals = _PassOn(proc)
    detector = Detector(plan.settings, RANK_RULES)
    fault: Fault | None = None
    kill_at: float | None = None
    try:
        while True:
            try:
                rc = proc.wait(timeout=plan.heartbeat_s)
                break
            except subprocess.TimeoutExpired:
                pass
            if kill_at is not None and time.monotonic() >= kill_at:
                say("the ranks did not stop in time; killing them")
                _kill(proc)
                kill_at = None
            if not plan.detect or fault is not None:
                continue
            records = {
                rec["worker"]: rec
                for path, rec in _records(health)
                if old.get(path.name) != _identity(rec)
            }
            for f in detector.update(time.monotonic(), records):
                action = "warn" if plan.on_fault == "warn" or fault is not None else "stop"
                if action == "stop" and f.kind != "hung":  # ask first: a dump takes a second
                    fault = f
                    request_stop(health, f)
                    kill_at = time.monotonic() + plan.stop_grace_s
                dump = _dump(f, plan.run_dir, proc.pid)
                say(f"fault: {f.message()}" + (f" [dump: {dump}]" if dump else ""))
                row = {"event": "fault", **f.to_dict(), "action": action, "dump": dump}
                _append(plan.run_dir, {**row, "restarts": restarts})
                if action == "warn":
                    continue
                if f.kind == "hung":
                    fault = f
                    say(f"stopping the run: {f.worker} cannot be waited for")
                    _kill(proc)
                else:
                    say(f"stopping the run at the end of the step ({f.worker} {f.kind})")
    except BaseException:
        _kill(proc)
        raise
    finally:
        signals.restore()
        _kill_leftovers(proc)
    return Attempt(rc=rc, fault=fault, seconds=time.monotonic() - t0, signum=signals.signum)


class _PassOn:
    """While torchrun runs: the first SIGINT or SIGTERM goes to each rank (torchrun's
    children) once, and is remembered; the next raises ``KeyboardInterrupt`` (the caller
    then kills everything). Only the main thread can install handlers."""

    def __init__(self, proc: subprocess.Popen[Any]) -> None:
        self.proc, self.signum = proc, 0
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.signum:
            raise KeyboardInterrupt
        self.signum = signum
        name = signal.Signals(signum).name
        say(
            f"{name}: the ranks finish the step in progress, save a checkpoint and stop "
            f"({name} again to stop now)"
        )
        for pid in children(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


def request_stop(health: Path, fault: Fault) -> None:
    """Ask the ranks to stop at the end of the step (``health/stop.json``). They save a
    checkpoint first unless the fault is a non-finite loss (that state is not worth
    keeping; the last periodic checkpoint stays)."""
    row = {**fault.to_dict(), "checkpoint": fault.kind != "broken"}
    tmp = health / (STOP_FILE + ".tmp")
    tmp.write_text(json.dumps(row), encoding="utf-8")
    os.replace(tmp, health / STOP_FILE)


def _identity(rec: dict[str, Any]) -> tuple[Any, ...]:
    return (rec.get("pid"), rec.get("started"), rec.get("host"))


def _records(health: Path) -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for path in sorted(health.glob("rank*.json")):
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # being replaced right now
        if isinstance(rec, dict) and "worker" in rec and "t" in rec:
            out.append((path, rec))
    return out


def _kill(proc: subprocess.Popen[Any]) -> None:
    """End torchrun and every rank below it (SIGCONT+SIGTERM, then SIGKILL)."""
    tree = [proc.pid, *descendants(proc.pid)]
    kill_tree(tree, grace_s=3.0)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _kill_leftovers(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        _kill(proc)
    left = descendants(proc.pid)
    if left:
        kill_tree(left, grace_s=1.0)


def _dump(fault: Fault, run_dir: Path, torchrun_pid: int) -> str | None:
    """Write the suspect's Python stacks (or /proc state when it cannot run) and its
    local peers' stacks to ``faults/``; returns the file's path (None: not on this node)."""
    local = set(descendants(torchrun_pid))
    if fault.pid not in local or fault.host != socket.gethostname():
        return None
    ranks = _local_ranks(run_dir, local)
    targets = [(w, int(r["pid"]), str(r.get("stacks", ""))) for w, r in ranks.items()]
    sections = capture_many(targets, sig=STACKS_SIGNAL)
    return write_dump(run_dir, fault.worker, fault.kind, fault.message(), sections)


def _local_ranks(run_dir: Path, local: set[int]) -> dict[str, dict[str, Any]]:
    return {
        rec["worker"]: rec
        for _, rec in _records(run_dir / HEALTH_DIR)
        if int(rec.get("pid") or 0) in local
    }


def _append(run_dir: Path, row: dict[str, Any]) -> None:
    row = {"time": time.time(), **row}
    with (run_dir / FAULTS_FILE).open("a", encoding="utf-8") as f:
        f.write(json.dumps(row, default=str) + "\n")


def latest_step(run_dir: Path) -> int:
    """The step of the newest complete checkpoint in ``run_dir/checkpoints`` (0: none)."""
    steps = []
    for d in (run_dir / "checkpoints").glob("step_*"):
        if (d / "trainer_state.json").is_file() and d.name[5:].isdigit():
            steps.append(int(d.name[5:]))
    return max(steps, default=0)
