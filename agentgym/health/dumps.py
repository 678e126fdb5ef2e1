"""What a fault leaves in the run folder: the suspect's Python stacks or ``/proc`` state.

:func:`capture` asks a process on this host for its Python stacks (it registered
:mod:`faulthandler` on SIGUSR2 with a file; the new part of that file is the answer). A
stopped process (SIGSTOP) cannot run the handler, and one stuck in the kernel may not:
for those, and in every case as a second section, the process's ``/proc`` state is
recorded (status, each thread's wait channel). :func:`write_dump` puts the sections in
``<run>/faults/<time>-<worker>-<kind>.txt``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

from agentgym.health.procs import alive, proc_state, state_letter

FAULTS_DIR = "faults"


def capture_many(
    targets: Sequence[tuple[str, int, str]], *, sig: int = signal.SIGUSR2, wait_s: float = 1.0
) -> dict[str, str]:
    """Python stacks (or the reason there are none) plus ``/proc`` state of each target.

    Args:
        targets: ``(name, pid, stacks file)`` of processes on this host.
        sig: the signal they dump their stacks on.
        wait_s: how long to give them to write.
    """
    marks: dict[str, int] = {}
    notes: dict[str, str] = {}
    for name, pid, stacks in targets:
        if not alive(pid):
            notes[name] = "(gone: no Python stacks)"
        elif state_letter(pid) in ("T", "t"):
            notes[name] = "(stopped: it cannot dump its Python stacks; its /proc state follows)"
        elif not stacks:
            notes[name] = "(no stacks file registered)"
        else:
            path = Path(stacks)
            marks[name] = path.stat().st_size if path.is_file() else 0
            try:
                os.kill(pid, sig)
            except OSError as e:
                notes[name] = f"(could not signal it: {e.strerror})"
                marks.pop(name)
    if marks:
        time.sleep(wait_s)
    out = {}
    for name, pid, stacks in targets:
        text = notes.get(name, "")
        if name in marks:
            try:
                with open(stacks, encoding="utf-8", errors="replace") as f:
                    f.seek(marks[name])
                    text = "--- Python stacks (faulthandler)\n" + (
                        f.read().strip() or f"(nothing written in {wait_s:g} s)"
                    )
            except OSError as e:
                text = f"(stacks not readable: {e.strerror})"
        out[name] = f"{text}\n{proc_state(pid)}"
    return out


def write_dump(run_dir: Path, worker: str, kind: str, header: str, sections: dict[str, str]) -> str:
    """Write a fault's dump file (the suspect's section first); returns its path."""
    folder = Path(run_dir) / FAULTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{worker}-{kind}.txt"
    parts = [header, ""]
    for name in sorted(sections, key=lambda n: (n != worker, n)):
        role = "suspect" if name == worker else "peer"
        parts += [f"===== {name} ({role})", sections[name]]
    path.write_text("\n".join(parts), encoding="utf-8")
    return str(path)
