"""Isolated execution of untrusted, model-written code.

Environments use this package to write an agent's files, run them and read results back;
trainers and benchmarks never import it. Two backends share one protocol
(:class:`Sandbox`): ``docker`` (the production default: a locked-down container) and
``local`` (the embedded default without Docker: bubblewrap, ``unshare`` or plain rlimits,
whichever is the strongest available). See ``docs/sandbox.md`` for what each isolates.

Example::

    from agentgym.sandbox import open_sandbox

    with open_sandbox(memory_mb=256) as sb:
        sb.write_files({"main.py": "print(6 * 7)"})
        print(sb.run("python3 main.py", timeout=10).stdout)   # 42

A :class:`SandboxPool` keeps warm sandboxes so an episode does not pay a container start.
"""

from __future__ import annotations

import logging
from typing import Any

from agentgym import ConfigError, SandboxError
from agentgym.sandbox.base import (
    DEFAULT_OUTPUT_LIMIT,
    ExecResult,
    Sandbox,
    SandboxLimits,
    SandboxPathError,
    SandboxUnavailableError,
)
from agentgym.sandbox.pool import SandboxPool

log = logging.getLogger("agentgym.sandbox")

BACKENDS = ("auto", "docker", "local")

__all__ = [
    "BACKENDS",
    "DEFAULT_OUTPUT_LIMIT",
    "ExecResult",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "SandboxPathError",
    "SandboxPool",
    "SandboxUnavailableError",
    "docker_available",
    "open_sandbox",
]

_REPORTED: set[str] = set()


def docker_available(image: str | None = None) -> str | None:
    """``None`` when the Docker backend can be used (engine answers, image present), else why
    not, with the fix."""
    try:
        from agentgym.sandbox.docker_backend import docker_client
        from agentgym.sandbox.image import default_image
    except ImportError as e:  # the docker SDK is missing
        return f"the docker Python SDK is not installed ({e}); pip install 'docker>=7.1'"
    try:
        client = docker_client()
        client.api.inspect_image(image or default_image())
    except SandboxUnavailableError as e:
        return str(e)
    except Exception as e:
        from docker.errors import ImageNotFound, NotFound

        if isinstance(e, ImageNotFound | NotFound):
            return (
                f"the image {image or default_image()} is not built; run "
                "`agentgym sandbox build-image`"
            )
        return f"the Docker engine did not answer properly: {e}"
    return None


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
    if backend not in BACKENDS:
        from agentgym import did_you_mean

        raise ConfigError(
            f"Unknown sandbox backend {backend!r}.{did_you_mean(backend, BACKENDS)} "
            f"Choose one of {', '.join(BACKENDS)}."
        )
    if backend == "auto":
        why_not = docker_available(image)
        if why_not is None:
            backend = "docker"
            _report("auto: using the docker backend", logging.INFO)
        else:
            backend = "local"
            from agentgym.sandbox.local_backend import best_level

            _report(
                f"auto: using the local backend ({level or best_level()}) because Docker "
                f"cannot be used: {why_not}",
                logging.WARNING,
            )
    if backend == "docker":
        from agentgym.sandbox.docker_backend import DockerSandbox

        return DockerSandbox(lim, image=image)
    from agentgym.sandbox.local_backend import LocalSandbox

    return LocalSandbox(lim, level=level)


def _report(message: str, level: int) -> None:
    """Log the auto choice once per distinct message."""
    if message not in _REPORTED:
        _REPORTED.add(message)
        log.log(level, message)
