"""The process's Docker SDK client, and what to say when no engine answers."""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from typing import Any

from agentgym.sandbox.errors import SandboxUnavailableError

__all__ = ["docker_client", "engine_problem"]

_CLIENT: Any = None
_CLIENT_PID = 0
_CLIENT_LOCK = threading.Lock()


def docker_client() -> Any:
    """The process's Docker SDK client (created on first use; one per process).

    Raises:
        SandboxUnavailableError: no engine answers; the message says how to start one.
    """
    global _CLIENT, _CLIENT_PID
    with _CLIENT_LOCK:
        if _CLIENT is None or os.getpid() != _CLIENT_PID:
            import docker

            try:
                _CLIENT = docker.from_env(max_pool_size=64)
            except Exception as e:
                raise SandboxUnavailableError(engine_problem(e)) from e
            if _CLIENT_PID == 0:
                atexit.register(_close_at_exit)
            _CLIENT_PID = os.getpid()
        return _CLIENT


def _close_at_exit() -> None:
    """At exit: remove this process's live containers (they use the client's
    connections), then close the client, so that no unclosed socket is left to the
    interpreter (a ResourceWarning in the user's console)."""
    from agentgym.sandbox.docker.containers import remove_live_containers

    global _CLIENT
    remove_live_containers()
    with _CLIENT_LOCK:
        client, _CLIENT = (_CLIENT, None) if os.getpid() == _CLIENT_PID else (None, _CLIENT)
    if client is not None:
        with contextlib.suppress(Exception):
            client.close()


def engine_problem(error: BaseException) -> str:
    """Explain why the engine cannot be reached, with the fix."""
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    text = str(error)
    if "Permission denied" in text or isinstance(error, PermissionError):
        return (
            f"Cannot talk to the Docker engine at {where}: permission denied. Fix: add your "
            "user to the 'docker' group (sudo usermod -aG docker $USER, then log in again) "
            "or run as root."
        )
    return (
        f"No Docker engine answers at {where} ({text.strip()[:200]}). Fix: start one "
        "(scripts/ensure_docker.sh installs Debian's docker.io and starts dockerd), set "
        "DOCKER_HOST to a running engine, or use backend='local'."
    )
