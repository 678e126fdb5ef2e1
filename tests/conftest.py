"""Shared pytest configuration: markers that skip what this machine cannot run, the
``xdist_group`` marks that ``--dist loadgroup`` (scripts/test.sh) keeps on one worker, and
OpenMP's passive waiting for torch's threads."""

from __future__ import annotations

import os

import pytest

# torch's CPU threads wait for each other by spinning (OpenMP's default): with two xdist
# workers on two cores, and the commands they start (the README's configs ask for two
# threads), a spinning thread holds a core that its partner or the other worker needs.
# Passive waiting sleeps instead, as scripts/quickstart.sh does; set OMP_WAIT_POLICY to
# choose otherwise. Set here, before anything imports torch; every child inherits it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# every key a test's training run writes must be in trainers/metric_keys.py's table
# (docs/metrics.md); the runs the tests start in other processes inherit it
os.environ.setdefault("AGENTGYM_STRICT_METRICS", "1")


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:
        has_cuda = False
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)
    if getattr(config.option, "loadgroup", False):
        _slow_modules_first(items)
        _group_suffixes(items)


def _slow_modules_first(items) -> None:
    """Under ``--dist loadgroup``: the modules that hold a ``slow`` test go first, each
    module whole and in its own order, the rest after them in collection order.

    xdist deals the ``xdist_group`` units first (the largest first), then every other test
    in collection order, one by one as a worker runs dry. A slow module near the end of
    the collection (``tests/trainers/test_tppo_trainer.py``: three launches of 15-30 s)
    then runs while the other worker has nothing left to take and idles; dealt first, the
    quick tests fill both workers to the end instead. A module stays contiguous so that
    its module-scoped fixtures are built once per worker, as before."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)  # stable: order within kept


def _group_suffixes(items) -> None:
    """On an xdist worker under ``--dist loadgroup``: each ``xdist_group`` test's node id
    ends in ``@GROUP``, which is how the controller learns the group (it sees ids only).

    pytest-xdist 3.8 writes that suffix into ``item._nodeid``, which pytest 9.2 no longer
    reads (its ids are structured, ``item._id``), so every test was dealt out on its own
    and each vLLM module started its engine on both workers (pytest-xdist issue 1386).
    Here the suffix goes where this pytest reads it, the way xdist names it (the group
    names sorted, joined by ``_``); where xdist's own suffix took effect, nothing changes.
    """
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # an older pytest: xdist's own suffix works there
        return

    for item in items:
        names = sorted(
            {
                str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                for m in item.iter_markers("xdist_group")
            }
        )
        if not names or "@" in item.nodeid or not isinstance(getattr(item, "_id", None), NodeId):
            continue
        item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


@pytest.fixture
def in_ci() -> bool:
    return bool(os.environ.get("CI"))
