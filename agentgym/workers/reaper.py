"""A local Ray's undertaker: when the process that started it dies, its Ray goes too.

A driver killed with SIGKILL cannot run ``ray.shutdown()``. Its Ray's core processes
notice within seconds, but the dashboard agent and the runtime-env agent lived on for up
to 85 s here, and the session folder (logs, sockets, spilled objects) stayed for good.
:func:`start_reaper` starts this file as a small separate process (standard library
only, in its own session, so that signals to the driver's group do not reach it) that
waits for the driver to end (its pid gone, or the pipe it holds closed by
:meth:`~agentgym.workers.RayEnvWorkers.close`), then ends every process of that Ray
session (those whose command line names the session folder, and those Ray's raylet
started, which carry ``RAY_RAYLET_PID`` in their environment) and removes the folder
unless the logs are to be kept.

Run as ``python reaper.py FD DRIVER_PID SESSION_DIR KEEP_LOGS``; Linux only (``/proc``).
Whether a process is alive is the core's one answer, :func:`agentgym.health.alive`: run as
a script (``python -I -S``: no site-packages, so not the ``agentgym`` package, whose
``__init__`` needs them) the reaper loads that function's module,
``agentgym/health/procs.py`` (standard library only), by its path.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

#: seconds between two looks at the driver
POLL_S = 0.5


def _procs_by_path():
    """``agentgym/health/procs.py`` loaded from its file, outside the ``agentgym`` package."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "health" / "procs.py"
    spec = importlib.util.spec_from_file_location("agentgym_reaper_procs", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":  # started by start_reaper: the standard library only
    alive = _procs_by_path().alive
else:
    from agentgym.health import alive


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _read(pid: int, name: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return b""


def session_processes(session_dir: str, raylets: set[int]) -> list[int]:
    """Processes of one Ray session: its folder on their command line, or started by one
    of its raylets (``RAY_RAYLET_PID`` in their environment)."""
    me = os.getpid()
    needle = session_dir.encode()
    marks = {f"RAY_RAYLET_PID={p}".encode() for p in raylets}
    out = []
    for pid in _pids():
        if pid == me:
            continue
        named = needle in _read(pid, "cmdline")
        if named or (marks and any(m in _read(pid, "environ").split(b"\0") for m in marks)):
            out.append(pid)
    return out


def raylets_of(session_dir: str) -> set[int]:
    """The raylet processes of a session (found by their command line)."""
    needle = session_dir.encode()
    return {
        p
        for p in _pids()
        if needle in (cmd := _read(p, "cmdline")) and b"raylet" in cmd.split(b"\0")[0]
    }


def reap(session_dir: str, raylets: set[int], keep_logs: bool) -> int:
    """End the session's processes (SIGTERM, 2 s, SIGKILL) and remove its folder unless
    ``keep_logs``. Returns how many processes were still there."""
    victims = session_processes(session_dir, raylets | raylets_of(session_dir))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in victims:
            try:
                os.kill(p, sig)
            except OSError:
                pass
        deadline = time.monotonic() + 2.0
        while sig == signal.SIGTERM and time.monotonic() < deadline:
            if not any(alive(p) for p in victims):
                break
            time.sleep(0.05)
    if not keep_logs:
        shutil.rmtree(session_dir, ignore_errors=True)
    return len(victims)


def main(argv: list[str]) -> int:
    fd, driver, session_dir, keep = int(argv[0]), int(argv[1]), argv[2], argv[3] == "1"
    raylets: set[int] = set()
    started = time.monotonic()
    while alive(driver):
        if not raylets and time.monotonic() - started < 60:
            raylets = raylets_of(session_dir)
        ready, _, _ = select.select([fd], [], [], POLL_S)
        if ready and not os.read(fd, 64):
            break  # the driver closed its end: a normal close() (or it died)
    reap(session_dir, raylets, keep)
    return 0


def start_reaper(session_dir: str, *, keep_logs: bool) -> tuple[subprocess.Popen[bytes], int]:
    """Start the reaper for the local Ray of ``session_dir``; returns it and the write
    end of its pipe (close that to tell it the driver is done)."""
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-S",
                os.path.abspath(__file__),
                str(read_end),
                str(os.getpid()),
                session_dir,
                "1" if keep_logs else "0",
            ],
            pass_fds=(read_end,),
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    finally:
        os.close(read_end)
    return proc, write_end


def stop_reaper(proc: subprocess.Popen[bytes], write_end: int, *, wait_s: float = 5.0) -> None:
    """Tell the reaper the driver is done (after its own ``ray.shutdown``) and wait for
    its last pass."""
    try:
        os.close(write_end)
    except OSError:
        pass
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
