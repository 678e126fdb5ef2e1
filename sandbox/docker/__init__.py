"""The Docker backend: one locked-down, labelled container per sandbox (the production default).

What it isolates and what it does not is in :mod:`agentgym.sandbox.docker.sandbox`. Its
modules, each with one job:

* :mod:`.client`: the process's Docker SDK client, and what to say when no engine answers;
* :mod:`.scripts`: the wrapper, file helper, kill-all and OOM scripts run in the container;
* :mod:`.containers`: create a container locked down and labelled, remove it, and remove
  this process's containers at exit and on SIGTERM/SIGINT;
* :mod:`.streaming`: one ``docker exec`` streamed into capped buffers, with a deadline;
* :mod:`.sandbox`: :class:`DockerSandbox`, the protocol on top of the above;
* :mod:`.leftovers`: list sandbox containers, prune those of dead owners;
* :mod:`.image`: the default image's recipe and name, and its local build.

The Docker SDK itself is imported on first use, not when this package is.
"""

from __future__ import annotations

from agentgym.sandbox.docker.client import docker_client, engine_problem
from agentgym.sandbox.docker.containers import (
    LABEL,
    install_signal_handlers,
    remove_live_containers,
)
from agentgym.sandbox.docker.image import (
    IMAGE_ENV,
    REPOSITORY,
    BuildResult,
    ImageRecipe,
    build_image,
    default_image,
    image_info,
)
from agentgym.sandbox.docker.leftovers import list_sandbox_containers, prune
from agentgym.sandbox.docker.sandbox import DockerSandbox

__all__ = [
    "IMAGE_ENV",
    "LABEL",
    "REPOSITORY",
    "BuildResult",
    "DockerSandbox",
    "ImageRecipe",
    "build_image",
    "default_image",
    "docker_client",
    "engine_problem",
    "image_info",
    "install_signal_handlers",
    "list_sandbox_containers",
    "prune",
    "remove_live_containers",
]
