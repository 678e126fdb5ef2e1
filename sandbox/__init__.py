"""Isolated execution of untrusted, model-written code: the sandbox's public names.

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

Modules, each with one job:

* :mod:`.errors`, :mod:`.limits`, :mod:`.inputs`, :mod:`.capture`, :mod:`.procfs`: the
  errors, limits, input checks, output capture and ``/proc`` reads every backend shares;
* :mod:`.base`: the protocol, :class:`Sandbox`, whose ``run`` is the one template
  method every backend fills in, and :class:`ExecResult`;
* :mod:`.docker` and :mod:`.local`: the two backends (subpackages);
* :mod:`.backends`: backend selection (``"auto"``) and :func:`open_sandbox`;
* :mod:`.pool`: :class:`SandboxPool`;
* :mod:`.checkup`: the checks behind ``agentgym sandbox doctor``.

Code outside this package uses only the names below.
"""

from __future__ import annotations

from agentgym import SandboxError
from agentgym.sandbox.backends import (
    BACKENDS,
    check_backend,
    docker_available,
    open_sandbox,
    resolve_backend,
)
from agentgym.sandbox.base import ExecResult, Sandbox
from agentgym.sandbox.checkup import Check, doctor
from agentgym.sandbox.docker import (
    BuildResult,
    DockerSandbox,
    ImageRecipe,
    build_image,
    default_image,
    docker_client,
    install_signal_handlers,
    list_sandbox_containers,
    prune,
)
from agentgym.sandbox.errors import SandboxPathError, SandboxUnavailableError
from agentgym.sandbox.limits import DEFAULT_OUTPUT_LIMIT, SandboxLimits
from agentgym.sandbox.local import LEVELS as LOCAL_LEVELS
from agentgym.sandbox.local import LocalSandbox, available_levels, best_level
from agentgym.sandbox.pool import SandboxPool

__all__ = [
    "BACKENDS",
    "DEFAULT_OUTPUT_LIMIT",
    "LOCAL_LEVELS",
    "BuildResult",
    "Check",
    "DockerSandbox",
    "ExecResult",
    "ImageRecipe",
    "LocalSandbox",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "SandboxPathError",
    "SandboxPool",
    "SandboxUnavailableError",
    "available_levels",
    "best_level",
    "build_image",
    "check_backend",
    "default_image",
    "docker_available",
    "docker_client",
    "doctor",
    "install_signal_handlers",
    "list_sandbox_containers",
    "open_sandbox",
    "prune",
    "resolve_backend",
]
