"""Fixtures for the AppGen tests: real sandboxes, no mocks.

Most tests run on ``BACKEND``: the local backend when its ``python3`` has pytest (Debian:
``apt-get install python3-pytest``), else Docker when its engine and image are usable.
With neither, they are skipped on a developer machine and fail in CI (``CI`` set), so CI
cannot pass by skipping. Tests marked ``docker`` always use Docker.

Grading on the local backend runs the grader and the project as one user, so AppGen
refuses it unless asked by name: tests that may run on it pass the opt-in explicitly
(:func:`sandbox_kwargs` for the env, :func:`unsafe_local` for :func:`grade`). They grade
reference solutions and test projects, never an agent's output.
"""

from __future__ import annotations

import os

import pytest

IN_CI = bool(os.environ.get("CI"))


def _local_problem() -> str | None:
    try:
        from agentgym.sandbox import open_sandbox

        with open_sandbox("local") as sb:
            res = sb.run(["python3", "-c", "import pytest, sqlite3"], timeout=60)
    except Exception as e:  # the backend itself cannot start here
        return f"the local sandbox cannot start: {e}"
    if res.exit_code != 0:
        return "the local sandbox's python3 has no pytest (apt-get install python3-pytest)"
    return None


def _docker_problem() -> str | None:
    from agentgym.sandbox import docker_available

    return docker_available()


LOCAL_PROBLEM = _local_problem()
DOCKER_PROBLEM = _docker_problem()
BACKEND = "local" if LOCAL_PROBLEM is None else ("docker" if DOCKER_PROBLEM is None else None)


def need_backend() -> str:
    """The backend for backend-agnostic tests; skips (fails in CI) when none works."""
    if BACKEND is None:
        why = f"local: {LOCAL_PROBLEM}; docker: {DOCKER_PROBLEM}"
        if IN_CI:
            pytest.fail(f"no sandbox backend can run AppGen tasks here ({why})")
        pytest.skip(f"no sandbox backend can run AppGen tasks here ({why})")
    return BACKEND


def need_docker() -> None:
    if DOCKER_PROBLEM is not None:
        if IN_CI:
            pytest.fail(f"Docker backend not usable: {DOCKER_PROBLEM}")
        pytest.skip(f"Docker backend not usable here: {DOCKER_PROBLEM}")


def sandbox_kwargs(backend: str) -> dict:
    """AppGen's make arguments for ``backend``: with the unsafe opt-in on the local one."""
    return {"sandbox": backend, **({"unsafe_local_grading": True} if backend == "local" else {})}


def unsafe_local(sandbox) -> dict:
    """:func:`grade`'s opt-in for a sandbox of the local backend (none for Docker)."""
    return {"unsafe_local_grading": True} if sandbox.backend == "local" else {}


@pytest.fixture(scope="session")
def backend() -> str:
    return need_backend()


@pytest.fixture
def sandbox(backend):
    """A fresh sandbox of ``backend`` (closed after the test)."""
    from agentgym.sandbox import open_sandbox

    with open_sandbox(backend, timeout=120) as sb:
        yield sb
