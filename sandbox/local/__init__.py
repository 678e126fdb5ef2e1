"""The local backend: a temporary workspace on this machine, isolated as far as it can be.

It is the embedded default where no Docker engine runs (a laptop, a CI job without an
engine). It picks the strongest of three levels that works here; ``LocalSandbox.isolation``
says which one it got, and ``level=`` forces one.

Modules: :mod:`.levels` (which levels work here, the wrapper argv of each),
:mod:`.process` (start a command under rlimits, kill everything it started),
:mod:`.streaming` (stdin in, capped output out, the deadline) and :mod:`.sandbox`
(:class:`LocalSandbox`).

Every level, always:
    * a fresh temporary workspace (and a private ``TMPDIR``), deleted on ``close``;
    * an empty environment apart from ``PATH``, ``HOME``, ``TMPDIR``, ``LANG`` and what
      the caller passes;
    * rlimits on every process: address space (``memory_mb``), CPU seconds, open files,
      file size (``workspace_mb``), no core dumps, and processes: at ``bwrap`` and
      ``unshare`` ``pids`` tasks counted inside the command's user namespace (util-linux
      ``prlimit`` sets the limit there), at ``rlimits`` ``pids`` more than the sandbox user
      already runs (a bound that moves with the user's other processes);
    * when agentgym itself runs as root, commands run as ``nobody`` (65534), never root;
    * the timeout kills the command's whole process group with SIGKILL, so processes that
      ignore SIGTERM die too; output is capped per stream, the rest drained and dropped.

``"bwrap"`` (bubblewrap, unprivileged user namespaces):
    Isolates: every namespace is new (user, pid, network, ipc, uts, mount, cgroup): no
    network but a private loopback, no view of host processes, host uid hidden (commands
    see uid 1000). The filesystem is built from scratch: ``/usr`` (and the ``/bin``,
    ``/lib`` links) and a short list of ``/etc`` files read-only, fresh ``/proc`` and
    ``/dev``, the workspace at ``/workspace`` and ``/tmp`` writable; nothing else of the
    host (no ``/home``, ``/root``, ``/var``, ``/opt``) is visible. All capabilities are
    dropped; the sandbox dies with its parent; when the command ends, every process it
    left behind is killed with the pid namespace.
    Does not isolate: memory is bounded per process (address space), not in total; the
    workspace size is bounded per file only; CPU share is not limited; no seccomp filter
    (the whole kernel syscall surface is reachable); what ``/usr`` and the listed
    ``/etc`` files contain is readable.

``"unshare"`` (util-linux ``unshare`` with a user namespace):
    Isolates: new user, pid, network, ipc, uts, mount and cgroup namespaces: no network,
    no view of host processes, leftovers die with the pid namespace, commands see uid
    1000 without capabilities.
    Does not isolate: the filesystem. Commands see the host's files and can read or write
    anything the host user (``nobody`` when agentgym runs as root) can. Same memory, disk
    and CPU caveats as bwrap.

``"rlimits"`` (plain subprocess):
    Isolates: only the rlimits above, the process group kill and, as root, the switch
    to ``nobody``.
    Does not isolate: network (fully open), filesystem (everything the user can reach),
    other processes (visible, and signalable when they belong to the same user), and a
    process that calls ``setsid()`` escapes the timeout kill. Use it only for code you
    would run yourself.
"""

from __future__ import annotations

from agentgym.sandbox.local.levels import LEVELS, available_levels, best_level
from agentgym.sandbox.local.sandbox import LocalSandbox

__all__ = ["LEVELS", "LocalSandbox", "available_levels", "best_level"]
