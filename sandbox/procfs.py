"""Facts about host processes read from ``/proc``: is an owner alive, when did it start."""

from __future__ import annotations

import os

__all__ = ["owner_alive", "process_start_ticks"]


def owner_alive(pid: int, start_ticks: str | None = None) -> bool:
    """Whether process ``pid`` on this host is alive (and started at ``start_ticks``)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if start_ticks:
        now = process_start_ticks(pid)
        if now is not None and now != start_ticks:
            return False  # the pid was reused by another process
    return True


def process_start_ticks(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (``/proc/PID/stat``), if readable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    rest = data[data.rfind(")") + 2 :].split()
    return rest[19] if len(rest) > 19 else None
