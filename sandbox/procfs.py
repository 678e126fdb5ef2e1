"""Facts about host processes read from ``/proc``: is an owner alive, when did it start.

Whether a pid is alive is the core's answer (:func:`agentgym.health.alive`: a zombie
counts as gone); this module adds the start time that tells a reused pid apart.
"""

from __future__ import annotations

from agentgym.health import alive

__all__ = ["owner_alive", "process_start_ticks"]


def owner_alive(pid: int, start_ticks: str | None = None) -> bool:
    """Whether process ``pid`` on this host is alive (and started at ``start_ticks``)."""
    if not alive(pid):
        return False
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
