"""End a finished command's process without the interpreter's teardown.

When a Python program returns, the interpreter finishes in three parts: it joins the
threads that are not daemons, runs the at-exit handlers (logging's flush, multiprocessing's
children, wandb's finish, ...), and then frees every module and object one by one. The
last part does nothing a user can see, yet with torch imported it takes 0.3-0.8 s, and in
a training rank that still holds its model, optimizer and process groups 1.6-2.3 s
(2-core VM). An ``agentgym train --nproc 2`` launch pays it three times over, one process
after another: the rank, torchrun, then the launcher.

:func:`exit_now` does the first two parts as the interpreter would, flushes stdout and
stderr, and ends the process with ``os._exit``. It is only for the end of a program
(``agentgym``, ``python -m agentgym``, agentgym's torchrun), never a library call: a test
that calls :func:`agentgym.cli.main` in its own process gets the status back as before.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def exit_now(status: int) -> NoReturn:
    """End the process with ``status`` after the threads' join and the at-exit handlers,
    skipping the objects' teardown. Falls back to a normal exit where this Python lacks
    the two steps it repeats, or when called from a thread other than the main one."""
    join_threads = getattr(threading, "_shutdown", None)
    run_handlers = getattr(atexit, "_run_exitfuncs", None)
    if join_threads is None or run_handlers is None:
        raise SystemExit(status)
    if threading.current_thread() is not threading.main_thread():
        raise SystemExit(status)
    join_threads()  # what the interpreter does first: non-daemon threads finish
    run_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing left to save
            status = status or 120  # the interpreter's own status for a failed flush
    os._exit(status)
