"""``python -m agentgym.cli.local_ranks NPROC ARGS...``: the ranks of a one-node launch,
forked from one process that imported torch, transformers and peft once.
(``NPROC SCRIPT.py ARGS...`` runs a script as the ranks instead, as ``torchrun
--standalone --nproc-per-node NPROC SCRIPT.py ARGS`` would: the tests' multi-process
helpers.)

torchrun starts every rank as a fresh interpreter, and every rank then imports torch,
transformers and peft on its own: ~4.5 CPU-s a rank on the 2-core VM, most of what a
short run on a tiny model costs (a one-step run: 12.4 CPU-s through torchrun, 7.5 forked
from here with 2 ranks, 23.9 and 10.1 with 4: :mod:`agentgym.benchmarks.perf.launch`).
On one node, ``agentgym train --nproc
N`` (:func:`agentgym.cli.train._launch`) starts this module instead: it imports what
every rank imports (:data:`PRELOAD`) once, then forks the ranks, each calling the same
``agentgym ARGS`` a torchrun rank runs, with the environment torchrun gives a rank
(``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` on a free
local port for rank 0's store, ...). Several nodes keep torchrun (its rendezvous), as
does a machine with GPUs (CUDA must not be initialised before a fork, and an import may
probe it) and ``AGENTGYM_LAUNCHER=torchrun`` (:func:`forks_here`).

It behaves as torchrun does where the launcher (:func:`agentgym.health.supervise`)
relies on it:

* the ranks are its children (the launcher passes a Ctrl-C to each) and get SIGKILL
  when it dies (``PR_SET_PDEATHSIG``); it gets SIGTERM when the launcher dies;
* a SIGINT / SIGTERM it receives goes on to the ranks, which are killed if they have not
  exited :data:`GRACE_S` later; it then exits with 128 + the signal;
* when a rank fails, the others get SIGTERM (SIGKILL :data:`GRACE_S` later), and it exits
  with the first failed rank's status (128 + the signal for a rank killed by one);
  a rank that stopped on purpose (:data:`~agentgym.cli.torchrun.MEANT`) has said why, a
  crash gets one more line here.

A forked rank starts with its launcher's heap: loading a checkpoint, its peak resident
memory above its share measured 5-7% higher than a torchrun rank's (so
``tests/trainers/test_loading_mesh.py``, which bounds it, launches through torchrun).

Forking is safe only from a process with one thread: if an import started one (none of
:data:`PRELOAD` does today), each rank starts as a fresh interpreter instead, as under
torchrun.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
import traceback
from typing import Any

#: what every ``agentgym train`` rank imports before its first step
PRELOAD = (
    "torch",
    "torch.distributed",
    "transformers.modeling_utils",
    "peft",
    "agentgym.trainers.loop",
)
#: how long the ranks have to exit after SIGTERM before SIGKILL (torchrun's figure)
GRACE_S = 30.0
#: set to ``torchrun`` to launch one node through torchrun as well
LAUNCHER_CHOICE = "AGENTGYM_LAUNCHER"
#: device files of NVIDIA's and AMD's GPU drivers: where one exists, torchrun starts the
#: ranks (an import that probes CUDA initialises its driver, which a fork cannot inherit)
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd")


def forks_here() -> bool:
    """Whether a one-node launch forks its ranks on this machine: no GPU driver's
    device file, and no ``AGENTGYM_LAUNCHER=torchrun``."""
    if os.environ.get(LAUNCHER_CHOICE, "") == "torchrun":
        return False
    return not any(os.path.exists(path) for path in GPU_DEVICE_FILES)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, nproc: int, port: int) -> dict[str, str]:
    """The variables torchrun sets for local rank ``rank`` of a one-node run of
    ``nproc``, but for three: rank 0 hosts the store on ``port`` at ``127.0.0.1``
    (torchrun's agent hosts it, ``TORCHELASTIC_USE_AGENT_STORE=True``, at ``localhost``),
    and there is no ``TORCHELASTIC_ERROR_FILE`` (no ``@record``-ed entry point here)."""
    n = str(nproc)
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "ROLE_NAME": "default",
        "WORLD_SIZE": n,
        "LOCAL_WORLD_SIZE": n,
        "GROUP_WORLD_SIZE": "1",
        "ROLE_WORLD_SIZE": n,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": f"agentgym-{os.getpid()}",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    }


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0  # unknown: do not fork


def _run_rank(rank: int, nproc: int, port: int, argv: list[str], fork: bool) -> None:
    """In the child: become rank ``rank``, forked as it is (``fork``) or as a fresh
    interpreter; never returns."""
    status = 1
    try:
        from agentgym.health import die_with_parent

        die_with_parent(signal.SIGKILL)
        os.environ.update(rank_env(rank, nproc, port))
        if not fork:
            entry = argv if _is_script(argv) else ["-m", "agentgym", *argv]
            os.execv(sys.executable, [sys.executable, "-u", *entry])
        for stream in (sys.stdout, sys.stderr):  # a line a write: ranks share the pipes
            stream.reconfigure(line_buffering=True)
        from agentgym.cli.fast_exit import exit_now

        try:
            status = _script(argv) if _is_script(argv) else _agentgym(argv)
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
            status = 1
        exit_now(status)
    except SystemExit:  # exit_now's fallback: end here all the same
        pass
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(status)


def _is_script(argv: list[str]) -> bool:
    return bool(argv) and argv[0].endswith(".py") and os.path.isfile(argv[0])


def _agentgym(argv: list[str]) -> int:
    """``python -m agentgym ARGV``, in this process."""
    import agentgym
    from agentgym.cli import main

    sys.argv = [os.path.join(os.path.dirname(agentgym.__file__), "__main__.py"), *argv]
    return main(argv)


def _script(argv: list[str]) -> int:
    """``python SCRIPT ARGS`` (``argv``), in this process."""
    import runpy

    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    runpy.run_path(argv[0], run_name="__main__")
    return 0


class _Ranks:
    """The forked ranks, waited for; what the module docstring says about signals and
    failures."""

    def __init__(self, pids: dict[int, int]) -> None:
        self.pids = pids  # pid -> rank, while it runs
        self.signum = 0
        self.failed: tuple[int, int] | None = None  # (rank, status)
        self.kill_at: float | None = None

    def on_signal(self, signum: int, frame: Any) -> None:
        self.signum = self.signum or signum
        self._stop(signum)

    def _stop(self, sig: int) -> None:
        for pid in self.pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if self.kill_at is None:
            self.kill_at = time.monotonic() + GRACE_S

    def wait(self) -> int:
        while self.pids:
            pid, wstatus = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                if self.kill_at is not None and time.monotonic() >= self.kill_at:
                    self._stop(signal.SIGKILL)
                time.sleep(0.05)
                continue
            rank = self.pids.pop(pid, None)
            if rank is None:
                continue
            code = os.waitstatus_to_exitcode(wstatus)
            status = 128 - code if code < 0 else code
            if status != 0 and self.failed is None and not self.signum:
                self.failed = (rank, status)
                _report(rank, status)
                self._stop(signal.SIGTERM)
        if self.signum:
            return 128 + self.signum
        return self.failed[1] if self.failed else 0


def _report(rank: int, status: int) -> None:
    from agentgym.cli.torchrun import MEANT

    if status not in MEANT:  # a rank that stopped on purpose has said why
        print(
            f"[agentgym train] rank {rank} failed (exit status {status}); stopping the others",
            file=sys.stderr,
            flush=True,
        )


def preload() -> bool:
    """Import :data:`PRELOAD`; whether this process may fork (it holds one thread).

    numpy's OpenBLAS starts worker threads when it loads, as many as ``OMP_NUM_THREADS``
    says: the launcher sets 1 where it is unset (as torchrun does), and with more
    exported the ranks start as fresh interpreters."""
    import importlib

    # first, as in a rank: the CLI's settings and the trainers' quiet loggers (torchao)
    import agentgym.cli
    import agentgym.trainers  # noqa: F401

    for name in PRELOAD:
        importlib.import_module(name)
    return _threads() == 1


def main(argv: list[str]) -> int:
    nproc, args = int(argv[0]), list(argv[1:])
    fork = preload()
    port = _free_port()
    sys.stdout.flush()
    sys.stderr.flush()
    pids: dict[int, int] = {}
    for rank in range(nproc):
        pid = os.fork()
        if pid == 0:
            _run_rank(rank, nproc, port, args, fork)
        pids[pid] = rank
    ranks = _Ranks(pids)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, ranks.on_signal)
    return ranks.wait()


if __name__ == "__main__":
    from agentgym.cli.fast_exit import exit_now

    exit_now(main(sys.argv[1:]))
