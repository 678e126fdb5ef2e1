"""The limits every sandbox runs under (:class:`SandboxLimits`), validated when created."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from agentgym import ConfigError, did_you_mean

__all__ = ["DEFAULT_OUTPUT_LIMIT", "SandboxLimits", "is_integer", "is_number"]

#: Default cap on captured bytes per output stream (stdout and stderr each).
DEFAULT_OUTPUT_LIMIT = 64 * 1024


def is_number(x: object) -> bool:
    """Whether ``x`` is an int or a float (``bool`` is not a number here)."""
    return isinstance(x, int | float) and not isinstance(x, bool)


def is_integer(x: object) -> bool:
    """Whether ``x`` is an int (``bool`` is not an integer here)."""
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True)
class SandboxLimits:
    """Resource and security limits of one sandbox. Every default is safe to use.

    Attributes:
        timeout: default seconds a :meth:`Sandbox.run` may take before everything it
            started is killed.
        output_limit: bytes kept per output stream of one run.
        memory_mb: memory limit in MiB (Docker: the container's memory cgroup, swap
            included, tmpfs pages count against it; local: address space per process).
        cpus: CPU share (Docker: ``nano_cpus``; ignored by the local backend).
        pids: most processes and threads at once (Docker: pids cgroup; local:
            ``RLIMIT_NPROC``, counted inside the command's user namespace, or at the
            ``rlimits`` level on top of what the sandbox user already runs).
        workspace_mb: size of the writable workspace (Docker: tmpfs size; local:
            largest single file, ``RLIMIT_FSIZE``, since a directory cannot be bounded).
        tmp_mb: size of ``/tmp`` (Docker tmpfs); ignored by the local backend.
        cpu_seconds: CPU seconds per process (local ``RLIMIT_CPU``); ``None`` means the
            run's timeout plus a margin.
        nofile: most open files per process.
        network: give the sandbox a network. ``False`` (the default) leaves it only a
            loopback interface of its own.
        user: ``uid:gid`` that commands run as inside a Docker container.
        read_only_root: mount the container's root filesystem read-only.
        max_read_bytes: largest file :meth:`Sandbox.read_file` returns.
    """

    timeout: float = 30.0
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    memory_mb: int = 512
    cpus: float = 1.0
    pids: int = 128
    workspace_mb: int = 256
    tmp_mb: int = 64
    cpu_seconds: int | None = None
    nofile: int = 1024
    network: bool = False
    user: str = "1000:1000"
    read_only_root: bool = True
    max_read_bytes: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        def need(name: str, ok: bool, what: str) -> None:
            if not ok:
                raise ConfigError(
                    f"sandbox limit {name}={getattr(self, name)!r} is invalid: it must be {what}."
                )

        need("timeout", is_number(self.timeout) and self.timeout > 0, "a number of seconds > 0")
        need(
            "output_limit",
            is_integer(self.output_limit) and self.output_limit >= 1,
            "an integer number of bytes >= 1",
        )
        need("memory_mb", is_integer(self.memory_mb) and self.memory_mb >= 16, "an integer >= 16")
        need("cpus", is_number(self.cpus) and self.cpus > 0, "a number > 0 (e.g. 0.5 or 2)")
        need("pids", is_integer(self.pids) and self.pids >= 8, "an integer >= 8")
        need(
            "workspace_mb",
            is_integer(self.workspace_mb) and self.workspace_mb >= 1,
            "an integer >= 1",
        )
        need("tmp_mb", is_integer(self.tmp_mb) and self.tmp_mb >= 1, "an integer >= 1")
        need(
            "cpu_seconds",
            self.cpu_seconds is None or (is_integer(self.cpu_seconds) and self.cpu_seconds >= 1),
            "None or an integer >= 1",
        )
        need("nofile", is_integer(self.nofile) and self.nofile >= 16, "an integer >= 16")
        need("network", isinstance(self.network, bool), "True or False")
        need("read_only_root", isinstance(self.read_only_root, bool), "True or False")
        need(
            "max_read_bytes",
            is_integer(self.max_read_bytes) and self.max_read_bytes >= 1,
            "an integer >= 1",
        )
        parts = self.user.split(":") if isinstance(self.user, str) else []
        need(
            "user",
            len(parts) == 2 and all(p.isdigit() for p in parts) and parts[0] != "0",
            "a numeric non-root 'uid:gid' such as '1000:1000'",
        )

    @classmethod
    def from_kwargs(cls, base: SandboxLimits | None = None, **overrides: Any) -> SandboxLimits:
        """``base`` (or the defaults) with ``overrides`` applied; unknown names are refused."""
        known = {f.name for f in dataclasses.fields(cls)}
        for name in overrides:
            if name not in known:
                raise ConfigError(
                    f"Unknown sandbox limit {name!r}.{did_you_mean(name, known)} "
                    f"Known limits: {', '.join(sorted(known))}."
                )
        return dataclasses.replace(base or cls(), **overrides)
