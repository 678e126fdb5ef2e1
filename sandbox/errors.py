"""The sandbox's own errors, both subclasses of :class:`agentgym.SandboxError`."""

from __future__ import annotations

from agentgym import SandboxError

__all__ = ["SandboxPathError", "SandboxUnavailableError"]


class SandboxPathError(SandboxError, ValueError):
    """A path given to a sandbox is absolute, escapes the workspace, or is malformed."""


class SandboxUnavailableError(SandboxError):
    """A backend cannot be used here (no engine, no image, missing tools); says how to fix."""
