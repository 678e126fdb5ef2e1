"""Fixtures for the sandbox tests.

Docker tests need a running engine and the sandbox image (``scripts/ensure_docker.sh``
provides both). Without them the Docker tests are skipped on a developer machine, but
when the environment variable ``CI`` is set they run anyway and fail with the reason, so
CI can never pass by skipping them.
"""

from __future__ import annotations

import os

import pytest

from agentgym.sandbox import docker_available

#: None when the Docker backend is usable here, else why not
DOCKER_PROBLEM = docker_available()
IN_CI = bool(os.environ.get("CI"))

#: one-liner that prints how many processes of uid 1000 exist besides itself and its
#: parent (the ``timeout`` wrapper); 0 means a command left nothing running
COUNT_USER_PROCS = r"""
import os
me = {os.getpid(), os.getppid()}
n = 0
for p in os.listdir("/proc"):
    if p.isdigit() and int(p) not in me:
        try:
            text = open(f"/proc/{p}/status").read()
        except OSError:
            continue
        if "\nUid:\t1000\t" in text:
            n += 1
print(n)
"""


def skip_without_docker() -> None:
    """Module-level skip for Docker test modules (never in CI: there they must run)."""
    if DOCKER_PROBLEM is not None and not IN_CI:
        pytest.skip(f"Docker backend not usable here: {DOCKER_PROBLEM}", allow_module_level=True)


@pytest.fixture(scope="module")
def shared_docker():
    """One Docker sandbox for a module's tests that leave it intact."""
    from agentgym.sandbox import open_sandbox

    with open_sandbox("docker") as sb:
        yield sb


@pytest.fixture
def dsb(shared_docker):
    """The module's Docker sandbox, emptied of files and processes before each test."""
    shared_docker.reset()
    return shared_docker


@pytest.fixture(scope="module", autouse=True)
def _docker_must_run_in_ci(request):
    """In CI a Docker test module fails at once, with the reason, when Docker is unusable."""
    if request.node.get_closest_marker("docker") and DOCKER_PROBLEM is not None:
        pytest.fail(f"CI is set, so the Docker tests must run, but: {DOCKER_PROBLEM}")
