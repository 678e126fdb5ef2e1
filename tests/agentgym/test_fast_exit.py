"""A finished command ends without the interpreter's teardown, yet loses nothing a normal
exit keeps: the status, buffered output, at-exit handlers, and threads still working."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    import atexit, sys, threading, time
    from pathlib import Path
    from agentgym.cli.fast_exit import exit_now

    out = Path(sys.argv[1])
    atexit.register(lambda: (out / "atexit").write_text("ran"))

    def late():
        time.sleep(0.3)
        (out / "thread").write_text("finished")

    threading.Thread(target=late).start()  # not a daemon: it must finish first
    sys.stdout.write("buffered, never flushed by hand")
    exit_now(3)
    """
)


def test_exit_now_keeps_the_status_the_output_the_handlers_and_the_threads(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "buffered, never flushed by hand"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread").read_text() == "finished"


def test_python_m_agentgym_ends_with_the_commands_status():
    ok = subprocess.run([sys.executable, "-m", "agentgym", "list"], capture_output=True, text=True)
    assert ok.returncode == 0 and "agentgym/BalancedMath-v0" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "agentgym", "info", "agentgym/NoSuchEnv-v0"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "NoSuchEnv" in bad.stderr
