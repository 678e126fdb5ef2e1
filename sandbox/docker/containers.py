"""Sandbox containers' lifecycle: create one locked down and labelled, remove it, and remove
this process's containers at interpreter exit and on SIGTERM/SIGINT."""

from __future__ import annotations

import atexit
import contextlib
import datetime as _dt
import functools
import logging
import os
import secrets
import signal
import socket
import threading
import time
from typing import Any

from agentgym import SandboxError
from agentgym.sandbox.docker.scripts import BASE_ENV, KEEPER_USER, WORKSPACE
from agentgym.sandbox.errors import SandboxUnavailableError
from agentgym.sandbox.limits import SandboxLimits
from agentgym.sandbox.procfs import process_start_ticks

log = logging.getLogger("agentgym.sandbox")

__all__ = [
    "LABEL",
    "LABEL_CREATED",
    "LABEL_HOST",
    "LABEL_PID",
    "LABEL_START",
    "ROOT_CAPABILITIES",
    "install_signal_handlers",
    "remove_container",
    "remove_live_containers",
    "start_container",
]

LABEL = "agentgym.sandbox"
LABEL_PID = "agentgym.owner_pid"
LABEL_HOST = "agentgym.owner_host"
LABEL_START = "agentgym.owner_start"
LABEL_CREATED = "agentgym.created"
#: the only capabilities in a sandbox container's bounding set: held by commands run as
#: root (uid 0, any gid: a trusted party such as the reset's clean-up or AppGen's step that
#: seals its grader's files, which may then read and change every file), never by any
#: other uid (non-root, no-new-privileges: the sandbox user and AppGen's grader hold none)
ROOT_CAPABILITIES = ("DAC_OVERRIDE",)


def start_container(
    api: Any, image: str, limits: SandboxLimits, name_prefix: str
) -> tuple[str, str]:
    """Create and start one sandbox container; returns its id and name.

    The container idles (``sleep infinity`` as the keeper user) until commands are
    exec'd into it; it is registered for removal at exit until :func:`remove_container`.

    Raises:
        SandboxUnavailableError: the image is not there (says how to build it).
        SandboxError: the engine refused to create or start the container.
    """
    from docker.errors import APIError, ImageNotFound
    from docker.types import Ulimit

    mem = f"{limits.memory_mb}m"
    host_config = api.create_host_config(
        init=True,
        network_mode="bridge" if limits.network else "none",
        cap_drop=["ALL"],
        cap_add=list(ROOT_CAPABILITIES),
        security_opt=["no-new-privileges"],
        read_only=limits.read_only_root,
        tmpfs={
            # root's; made sticky and open to all once started (_open_workspace)
            WORKSPACE: f"size={limits.workspace_mb}m,mode=1777,exec",
            "/tmp": f"size={limits.tmp_mb}m,mode=1777,exec",
        },
        mem_limit=mem,
        memswap_limit=mem,
        nano_cpus=int(limits.cpus * 1e9),
        pids_limit=limits.pids,
        # System V IPC of its own, and a segment dies with the last process attached to it
        # (none outlives its holder's processes; semaphores and queues the reset removes)
        ipc_mode="private",
        sysctls={"kernel.shm_rmid_forced": "1"},
        ulimits=[
            Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile),
            Ulimit(name="core", soft=0, hard=0),
        ],
    )
    name = f"{name_prefix}-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        created = api.create_container(
            image,
            command=["infinity"],
            entrypoint=["sleep"],
            user=KEEPER_USER,
            labels=_owner_labels(),
            name=name,
            hostname="sandbox",
            working_dir=WORKSPACE,
            environment=BASE_ENV,
            host_config=host_config,
        )
    except ImageNotFound as e:
        raise SandboxUnavailableError(_image_missing(image)) from e
    except APIError as e:
        if e.status_code == 404 and "image" in str(e).lower():
            raise SandboxUnavailableError(_image_missing(image)) from e
        raise SandboxError(f"Docker could not create a sandbox container: {e}") from e
    cid = created["Id"]
    _register(cid, api)
    try:
        api.start(cid)
        _open_workspace(api, cid)
    except Exception as e:
        with contextlib.suppress(Exception):
            api.remove_container(cid, force=True)
        _unregister(cid)
        raise SandboxError(
            f"Docker could not start the sandbox container: {e}. Run `agentgym sandbox "
            "doctor` to check the engine."
        ) from e
    log.debug("started sandbox container %s (%s)", name, cid[:12])
    return cid, name


def _open_workspace(api: Any, container_id: str) -> None:
    """Make the workspace's mount root root's and sticky (1777), as ``/tmp``, before any
    command runs: every user may add files and remove its own, and no holder can change
    the mount root itself (its mode, an ACL, extended attributes, its times), which
    outlives every holder of a pooled sandbox. (The engine gives a tmpfs mount root the
    mode of the image's directory, whatever the mount asks for, so it is set here.)"""
    run = api.exec_create(container_id, ["chmod", "1777", WORKSPACE], user=KEEPER_USER)
    out = api.exec_start(run["Id"])
    code = api.exec_inspect(run["Id"]).get("ExitCode")
    if code != 0:
        raise SandboxError(f"chmod 1777 {WORKSPACE} failed (exit {code}): {out!r}")


def remove_container(api: Any, container_id: str) -> None:
    """Remove a container (forced, errors ignored) and forget it."""
    _unregister(container_id)
    with contextlib.suppress(Exception):
        api.remove_container(container_id, force=True)


def _owner_labels() -> dict[str, str]:
    """The labels that let :func:`~agentgym.sandbox.docker.prune` find a dead owner's containers."""
    return {
        LABEL: "1",
        LABEL_PID: str(os.getpid()),
        LABEL_HOST: socket.gethostname(),
        LABEL_START: process_start_ticks(os.getpid()) or "",
        LABEL_CREATED: _dt.datetime.fromtimestamp(time.time(), _dt.UTC).isoformat(
            timespec="seconds"
        ),
    }


def _image_missing(image: str) -> str:
    return (
        f"Docker image {image!r} is not there. Build the default sandbox image with "
        "`agentgym sandbox build-image` (nothing can be pulled on these machines), or set "
        "AGENTGYM_SANDBOX_IMAGE / image= to an image you have (see `docker images`)."
    )


# ---------------------------------------------------------------------------------------
# containers of this process: removed at exit and on SIGTERM/SIGINT


_LIVE: dict[str, tuple[int, Any]] = {}  # container id -> (owner pid, APIClient)
_LIVE_LOCK = threading.RLock()
_HANDLERS: dict[int, Any] = {}


def _register(container_id: str, api: Any) -> None:
    with _LIVE_LOCK:
        _LIVE[container_id] = (os.getpid(), api)
    install_signal_handlers()


def _unregister(container_id: str) -> None:
    with _LIVE_LOCK:
        _LIVE.pop(container_id, None)


def remove_live_containers() -> int:
    """Remove every container this process created and has not closed; returns how many."""
    with _LIVE_LOCK:
        mine = [(cid, api) for cid, (pid, api) in _LIVE.items() if pid == os.getpid()]
        for cid, _ in mine:
            _LIVE.pop(cid, None)
    if not mine:
        return 0

    def remove(item: tuple[str, Any]) -> None:
        cid, api = item
        with contextlib.suppress(Exception):
            api.remove_container(cid, force=True)

    threads = []
    for item in mine:
        t = threading.Thread(target=remove, args=(item,), daemon=True)
        try:
            t.start()
            threads.append(t)
        except RuntimeError:  # no new threads at interpreter shutdown: do it here
            remove(item)
    for t in threads:
        t.join(timeout=30)
    return len(mine)


atexit.register(remove_live_containers)


def install_signal_handlers() -> bool:
    """Remove this process's containers on SIGTERM and SIGINT, then chain to the old handler.

    With Python's default SIGINT handler the signal only raises ``KeyboardInterrupt`` as
    before; the containers then go with the ``with`` blocks that unwind and, if the
    program ends, with the atexit hook. A signal the program ignores stays ignored.

    Called automatically when the first container starts; signal handlers can only be
    installed from the main thread, so an application that opens its first sandbox from
    another thread should call this once from the main thread. Returns whether the
    handlers are in place.
    """
    if threading.current_thread() is not threading.main_thread():
        return bool(_HANDLERS)
    with _LIVE_LOCK:
        for sig in (signal.SIGTERM, signal.SIGINT):
            current = signal.getsignal(sig)
            if isinstance(current, functools.partial) and current.func is _on_signal:
                continue
            if current == signal.SIG_IGN:
                continue  # the program ignores it and goes on: its sandboxes stay
            _HANDLERS[sig] = current
            signal.signal(sig, functools.partial(_on_signal, previous=current))
    return True


def _on_signal(signum: int, frame: Any, *, previous: Any) -> None:
    if previous is signal.default_int_handler:
        # Ctrl-C raises KeyboardInterrupt: `with` blocks close their sandboxes as it
        # unwinds and the atexit hook removes the rest if the program ends; a program
        # that catches it (a REPL) keeps its sandboxes.
        previous(signum, frame)
        return
    remove_live_containers()
    if callable(previous):
        previous(signum, frame)
    else:  # default action: restore it and deliver the signal again
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
