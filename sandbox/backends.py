"""Backend selection, in one place: the backend names, ``"auto"`` resolved to Docker or
local (with the reason when it falls back), and :func:`open_sandbox`."""

from __future__ import annotations

import logging
import threading
from typing import Any

from agentgym import ConfigError, did_you_mean
from agentgym.sandbox.base import Sandbox
from agentgym.sandbox.docker import DockerSandbox, default_image, image_info
from agentgym.sandbox.errors import SandboxUnavailableError
from agentgym.sandbox.limits import SandboxLimits
from agentgym.sandbox.local import LocalSandbox, best_level

log = logging.getLogger("agentgym.sandbox")

__all__ = ["BACKENDS", "check_backend", "docker_available", "open_sandbox", "resolve_backend"]

#: the backend names a caller may ask for
BACKENDS = ("auto", "docker", "local")

_REPORTED: set[str] = set()
_REMEMBERED: dict[str | None, str] = {}  # image -> what "auto" became, for remember=True
_LOCK = threading.Lock()


def check_backend(name: str, *, argument: str | None = None) -> str:
    """``name`` if it is one of :data:`BACKENDS`, else a :class:`ConfigError`.

    Args:
        name: the backend asked for.
        argument: how the caller's users name the setting (for example "AppGen's sandbox
            argument"), so that the error points at what to change.
    """
    if name not in BACKENDS:
        choices = ", ".join(BACKENDS)
        fix = f"{argument} must be one of {choices}." if argument else f"Choose one of {choices}."
        raise ConfigError(f"Unknown sandbox backend {name!r}.{did_you_mean(name, BACKENDS)} {fix}")
    return name


def docker_available(image: str | None = None) -> str | None:
    """``None`` when the Docker backend can be used (engine answers, image present), else why
    not, with the fix."""
    wanted = image or default_image()
    try:
        found = image_info(wanted)
    except ImportError as e:  # the docker SDK is missing
        return f"the docker Python SDK is not installed ({e}); pip install 'docker>=7.1'"
    except SandboxUnavailableError as e:
        return str(e)
    except Exception as e:
        return f"the Docker engine did not answer properly: {e}"
    if found is None:
        return f"the image {wanted} is not built; run `agentgym sandbox build-image`"
    return None


def resolve_backend(
    name: str,
    *,
    image: str | None = None,
    level: str | None = None,
    remember: bool = False,
) -> str:
    """The concrete backend for ``name``: ``"auto"`` becomes ``"docker"`` when an engine
    answers and the image is there, else ``"local"``; the others stay as they are.

    The choice for ``"auto"`` is logged once per distinct message: at INFO for Docker, as a
    warning with the reason (and the local level) when it falls back.

    Args:
        name: ``"auto"``, ``"docker"`` or ``"local"``.
        image: the Docker image that must be present (default: the built one).
        level: the local level that would be used (only named in the fallback message).
        remember: reuse this process's earlier answer for ``"auto"`` and ``image`` instead
            of asking the engine again (for callers that resolve on every episode).

    Raises:
        ConfigError: an unknown backend name.
    """
    check_backend(name)
    if name != "auto":
        return name
    if remember:
        with _LOCK:
            if image in _REMEMBERED:
                return _REMEMBERED[image]
    why_not = docker_available(image)
    if why_not is None:
        chosen = "docker"
        _report("auto: using the docker backend", logging.INFO)
    else:
        chosen = "local"
        _report(
            f"auto: using the local backend ({level or best_level()}) because Docker "
            f"cannot be used: {why_not}",
            logging.WARNING,
        )
    if remember:
        with _LOCK:
            chosen = _REMEMBERED.setdefault(image, chosen)
    return chosen


def open_sandbox(
    backend: str = "auto",
    *,
    limits: SandboxLimits | None = None,
    image: str | None = None,
    level: str | None = None,
    **limit_overrides: Any,
) -> Sandbox:
    """Open a sandbox; use the result as a context manager so it is always closed.

    Args:
        backend: ``"docker"``, ``"local"``, or ``"auto"``: Docker when an engine answers
            and the image is present, else local. The choice is logged (a warning when it
            falls back to local) and readable as ``sandbox.backend`` / ``.isolation``.
        limits: a :class:`SandboxLimits` to start from.
        image: Docker image (default: ``$AGENTGYM_SANDBOX_IMAGE`` or the built one).
        level: local isolation level (``"bwrap"``, ``"unshare"``, ``"rlimits"``;
            default: the strongest available).
        **limit_overrides: any :class:`SandboxLimits` field, e.g. ``memory_mb=256``.

    Raises:
        ConfigError: unknown backend or limit name, or an invalid limit value.
        SandboxUnavailableError: the backend asked for cannot be used here (says how to fix).
    """
    lim = SandboxLimits.from_kwargs(limits, **limit_overrides)
    concrete = resolve_backend(backend, image=image, level=level)
    if concrete == "docker":
        return DockerSandbox(lim, image=image)
    return LocalSandbox(lim, level=level)


def _report(message: str, level: int) -> None:
    """Log the auto choice once per distinct message."""
    if message not in _REPORTED:
        _REPORTED.add(message)
        log.log(level, message)
