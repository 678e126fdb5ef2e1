"""A torchrun worker: does ``shutdown`` free the process groups a run holds in a cycle?

Run as ``python -m torch.distributed.run --nproc-per-node 2 shutdown_probe.py``. Each rank
joins the gloo group as a run does, makes a second group and keeps it where a trainer
keeps its meshes (an object in a reference cycle, dropped before ``shutdown``), runs a
collective on both, then calls :func:`agentgym.trainers.distributed.shutdown` and prints
``gloo threads left: N``: the gloo worker threads (``pt_gloo_runloop``) still alive.
Freed only by the interpreter's exit, a group's threads can abort the process there.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from agentgym.trainers.distributed import init_distributed, shutdown


def gloo_threads() -> int:
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm", encoding="utf-8") as f:
                names.append(f.read().strip())
        except OSError:
            continue
    return names.count("pt_gloo_runloop")


class Holder:
    """Stands in for a trainer: it holds a group and is part of a reference cycle."""

    def __init__(self) -> None:
        self.group = dist.new_group(backend="gloo")
        self.me = self


def main() -> None:
    info = init_distributed(timeout_s=60, backend="gloo")
    holder = Holder()
    t = torch.ones(2)
    dist.all_reduce(t)
    dist.all_reduce(t, group=holder.group)
    assert gloo_threads() > 0
    del holder
    shutdown(info)
    # one write of a whole line: both ranks share the test's pipe, and print() writes the
    # text and its newline apart when stdout is unbuffered, so two lines could interleave
    os.write(1, f"rank {info.rank} gloo threads left: {gloo_threads()}\n".encode())


if __name__ == "__main__":
    main()
