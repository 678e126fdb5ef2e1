"""The process a run trains in: malloc settings, torch threads, and every RNG's seed."""

from __future__ import annotations

import random

import numpy as np
import torch


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed memory for reuse instead of returning it to the OS.

    Generation grows its KV cache step by step and training allocates activations of new
    shapes, so a run frees and re-allocates large blocks constantly. By default glibc
    serves blocks above a (dynamic) threshold with ``mmap`` and gives them back on free,
    and trims the heap top; every re-allocation then page-faults its memory in again. On
    virtual machines whose guest memory is backed lazily (and reclaimed by free-page
    reporting) that costs seconds per step: measured here, the first ``generate`` calls
    of a tiny model took 30+ s instead of 0.6 s. This sets ``M_MMAP_THRESHOLD`` to 1 GiB,
    ``M_TRIM_THRESHOLD`` to 2 GiB and ``M_TOP_PAD`` to 64 MiB, so freed memory stays in
    the process. The process's resident memory no longer shrinks; nothing else changes.
    A no-op (returning False) where the C library is not glibc.
    """
    import ctypes
    import ctypes.util
    import platform

    if platform.system() != "Linux":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    ok = mallopt(m_mmap_threshold, 1 << 30) == 1
    ok &= mallopt(m_trim_threshold, (1 << 31) - 1) == 1
    ok &= mallopt(m_top_pad, 64 << 20) == 1
    return bool(ok)


def setup_torch(threads: int | None, seed: int) -> None:
    """Thread count, seeds of every RNG, and malloc settings (:func:`keep_freed_memory`)."""
    keep_freed_memory()
    if threads is not None:
        torch.set_num_threads(threads)
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
