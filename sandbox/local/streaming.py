"""Output streaming of a local run: feed stdin, drain stdout and stderr into capped
buffers, and hand the process to a :class:`~.process.Killer` at the deadline or once the
command has exited (whatever it left running goes too)."""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import time

from agentgym.sandbox.capture import CappedBuffer
from agentgym.sandbox.local.process import Killer, exited

__all__ = ["pump"]


def pump(
    proc: subprocess.Popen[bytes],
    stdin: bytes | None,
    out: CappedBuffer,
    err: CappedBuffer,
    deadline: float,
    level: str,
    ns_init: tuple[int, str | None] | None,
) -> bool:
    """Feed stdin, drain stdout/stderr, kill at the ``deadline`` (a ``time.monotonic``
    value) or once the command has exited. Returns whether it timed out."""
    if proc.stdout is None or proc.stderr is None:
        raise ValueError("pump needs a process started with stdout and stderr pipes")
    sel = selectors.DefaultSelector()
    sinks = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    for fd in sinks:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    pending = memoryview(stdin) if stdin else None
    stdin_fd = -1
    if proc.stdin is not None:
        if pending:
            stdin_fd = proc.stdin.fileno()
            os.set_blocking(stdin_fd, False)
            sel.register(stdin_fd, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
    timed_out = False
    killer: Killer | None = None
    try:
        while True:
            now = time.monotonic()
            if killer is None and now >= deadline:
                timed_out = True
                killer = Killer(proc.pid, level, ns_init, kill=True)
            elif killer is None and exited(proc.pid):
                # the command is done: whatever it left running goes too
                killer = Killer(proc.pid, level, ns_init, kill=False)
            if killer is not None:
                killer.step()
                if not sel.get_map() or killer.gave_up():
                    break  # done (or an escaped process holds the pipes: stop reading)
            elif not sel.get_map():
                # output closed but the command still runs: wait for it or the deadline
                time.sleep(max(0.0, min(0.01, deadline - now)))
                continue
            wait = 0.05 if killer is not None else min(0.05, deadline - now)
            for key, _ in sel.select(max(wait, 0.0)):
                fd = key.fd
                if fd == stdin_fd:
                    try:
                        n = os.write(fd, pending[: 64 * 1024])  # type: ignore[index]
                        pending = pending[n:]  # type: ignore[index]
                    except BlockingIOError:
                        continue
                    except OSError:  # the command closed its stdin
                        pending = None
                    if not pending:
                        sel.unregister(fd)
                        proc.stdin.close()  # type: ignore[union-attr]
                        stdin_fd = -1
                    continue
                try:
                    data = os.read(fd, 256 * 1024)
                except BlockingIOError:
                    continue
                if data:
                    sinks[fd].feed(data)
                else:
                    sel.unregister(fd)
    finally:
        sel.close()
        for f in (proc.stdin, proc.stdout, proc.stderr):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        if killer is None:
            killer = Killer(proc.pid, level, ns_init, kill=True)
        killer.finish()
    return timed_out
