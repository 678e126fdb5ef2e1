"""Finding sandbox containers on the engine and pruning those whose owner process is gone."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from agentgym.sandbox.docker.client import docker_client
from agentgym.sandbox.docker.containers import LABEL, LABEL_HOST, LABEL_PID, LABEL_START
from agentgym.sandbox.procfs import owner_alive

log = logging.getLogger("agentgym.sandbox")

__all__ = ["list_sandbox_containers", "prune"]


def list_sandbox_containers(*, owner_pid: int | None = None) -> list[dict[str, Any]]:
    """Every agentgym sandbox container on the engine (running or not), as the engine
    lists them; optionally only those of one owner process."""
    filters = [f"{LABEL}=1"]
    if owner_pid is not None:
        filters.append(f"{LABEL_PID}={owner_pid}")
    return docker_client().api.containers(all=True, filters={"label": filters})


def prune(*, everything: bool = False, dry_run: bool = False) -> list[str]:
    """Remove sandbox containers whose owner process is gone.

    A container is a leftover when it was created on this host (label
    ``agentgym.owner_host`` equals this host name) and its owner pid is no longer alive
    (or was reused by a process that started later). Containers from other hosts sharing
    the engine are left alone, since their owners cannot be checked from here.

    Args:
        everything: remove every agentgym sandbox container, live owners included.
        dry_run: only report what would be removed.

    Returns:
        The names of the containers removed (or that would be).
    """
    api = docker_client().api
    host = socket.gethostname()
    doomed: list[tuple[str, str]] = []
    for c in list_sandbox_containers():
        labels = c.get("Labels") or {}
        name = (c.get("Names") or ["?"])[0].lstrip("/")
        if not everything:
            if labels.get(LABEL_HOST) != host:
                continue
            try:
                pid = int(labels.get(LABEL_PID, ""))
            except ValueError:
                pid = -1
            if owner_alive(pid, labels.get(LABEL_START) or None):
                continue
        doomed.append((c["Id"], name))
    if dry_run:
        return [name for _, name in doomed]
    removed: list[str] = []
    lock = threading.Lock()

    def remove(item: tuple[str, str]) -> None:
        cid, name = item
        try:
            api.remove_container(cid, force=True)
        except Exception as e:  # already gone, or removal in progress elsewhere
            if "already in progress" in str(e):  # another process prunes it: wait for that
                if not _gone_within(api, cid, REMOVAL_WAIT_S):
                    log.warning("%s is still being removed after %.0f s", name, REMOVAL_WAIT_S)
                    return
            elif "No such container" not in str(e):
                log.warning("could not remove %s: %s", name, e)
                return
        with lock:
            removed.append(name)

    _parallel(remove, doomed)
    return sorted(removed)


#: how long a prune waits for a removal that another process started
REMOVAL_WAIT_S = 60.0


def _gone_within(api: Any, cid: str, seconds: float) -> bool:
    """Whether container ``cid`` no longer exists within ``seconds`` (what a prune
    reports as removed is gone when it returns, whoever removed it)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            api.inspect_container(cid)
        except Exception as e:
            if "No such container" in str(e) or getattr(e, "status_code", None) == 404:
                return True
            raise
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def _parallel(fn: Callable[[Any], None], items: Sequence[Any], width: int = 8) -> None:
    from concurrent.futures import ThreadPoolExecutor

    if not items:
        return
    try:
        with ThreadPoolExecutor(max_workers=min(width, len(items))) as ex:
            list(ex.map(fn, items))
    except RuntimeError:  # at interpreter exit no new threads: one at a time
        for item in items:
            fn(item)
