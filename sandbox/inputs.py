"""Checks on what callers hand a sandbox: workspace paths, commands, env, file content.

These are the syntactic rules every backend shares; backends also resolve symlinks inside
the workspace and refuse those that lead out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentgym import SandboxError
from agentgym.sandbox.errors import SandboxPathError

__all__ = ["check_relative_path", "command_argv", "env_strings", "to_bytes"]


def check_relative_path(path: str) -> str:
    """Validate a workspace path and return its normal form (``a/b.txt``).

    Raises:
        SandboxPathError: the path is empty, absolute, contains ``..`` or a NUL byte.
    """
    if not isinstance(path, str):
        raise SandboxPathError(
            f"Sandbox paths are strings relative to the workspace, got {type(path).__name__}."
        )
    if not path or path.strip() == "":
        raise SandboxPathError("Empty sandbox path; give a path relative to the workspace.")
    if "\x00" in path:
        raise SandboxPathError(f"Sandbox path {path!r} contains a NUL byte.")
    if path.startswith("/"):
        raise SandboxPathError(
            f"Sandbox path {path!r} is absolute; paths are relative to the workspace, "
            f"e.g. {path.lstrip('/') or 'main.py'!r}."
        )
    parts = path.split("/")
    if ".." in parts:
        raise SandboxPathError(
            f"Sandbox path {path!r} contains '..'; it may not leave the workspace. "
            "Write paths relative to the workspace root without '..'."
        )
    norm = "/".join(p for p in parts if p not in ("", "."))
    if not norm:
        raise SandboxPathError(
            f"Sandbox path {path!r} names the workspace itself; name a file inside it."
        )
    return norm


def command_argv(cmd: str | Sequence[str]) -> list[str]:
    """The argv for ``cmd``: a string runs through ``sh -c``, a sequence runs as is."""
    if isinstance(cmd, str):
        if not cmd.strip():
            raise SandboxError("Empty command; pass a shell command string or an argv list.")
        return ["sh", "-c", cmd]
    argv = list(cmd)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise SandboxError("A command list must be a non-empty list of strings (an argv).")
    if any("\x00" in a for a in argv):
        raise SandboxError("Command arguments may not contain NUL bytes.")
    return argv


def env_strings(env: Mapping[str, str] | None) -> dict[str, str]:
    """Validate an ``env`` mapping (string keys and values, no ``=`` in keys)."""
    out: dict[str, str] = {}
    for k, v in (env or {}).items():
        if not isinstance(k, str) or not isinstance(v, str) or not k or "=" in k:
            raise SandboxError(f"env must map variable names to strings; bad entry {k!r}: {v!r}.")
        if "\x00" in k or "\x00" in v:
            raise SandboxError(f"env entry {k!r} contains a NUL byte.")
        out[k] = v
    return out


def to_bytes(content: str | bytes, path: str) -> bytes:
    """File content as bytes; ``str`` is encoded as UTF-8."""
    if isinstance(content, str):
        return content.encode("utf-8")
    if isinstance(content, bytes | bytearray | memoryview):
        return bytes(content)
    raise SandboxError(f"Content for {path!r} must be str or bytes, got {type(content).__name__}.")
