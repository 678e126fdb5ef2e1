"""The exceptions agentgym raises on purpose.

Every message says what went wrong *and* what to do about it. Configuration problems are
raised early (at ``make`` time or start-up); problems with what an agent wrote are never
exceptions: environments turn them into feedback or a zero reward.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class AgentGymError(Exception):
    """Base class of every error agentgym raises on purpose."""


class ConfigError(AgentGymError, ValueError):
    """A configuration value is missing, of the wrong type or out of range."""


class UnknownNameError(AgentGymError, KeyError):
    """A name (environment id, policy, suite, config key) is not known.

    The message lists the closest known names, Gymnasium's "did you mean" style.
    """

    def __init__(self, kind: str, name: str, known: Iterable[str], hint: str = "") -> None:
        known = sorted(set(known))
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        msg = f"Unknown {kind} {name!r}."
        if close:
            msg += " Did you mean: " + ", ".join(repr(c) for c in close) + "?"
        elif known and len(known) <= 20:
            msg += " Known: " + ", ".join(known) + "."
        if hint:
            msg += " " + hint
        super().__init__(msg)
        self.kind, self.name, self.suggestions = kind, name, close

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class EnvStateError(AgentGymError, RuntimeError):
    """An environment method was called in the wrong state (step before reset, after the end)."""


class DataError(AgentGymError, ValueError):
    """A data file is malformed; the message names the file, the row and the field."""


class PolicyError(AgentGymError, RuntimeError):
    """A policy could not produce a completion (endpoint down, retries exhausted, bad reply)."""


class CheckpointError(AgentGymError, RuntimeError):
    """A checkpoint cannot be written or read back as it was saved (a file missing,
    truncated or changed since, a full disk); the message names the checkpoint and the
    file."""


class SandboxError(AgentGymError, RuntimeError):
    """The sandbox could not be created or used (engine missing, image missing, bad path)."""


class InfraError(AgentGymError, RuntimeError):
    """Something around the agent failed, so its episode cannot be scored.

    A sandbox or its container died, the Docker engine stopped answering, a grader worker
    crashed or ran out of time, an endpoint went away. Never the agent's fault: an env
    raises this instead of returning a reward of 0 (which training would learn from), and
    :func:`agentgym.rollout` records the episode as failed with ``reason``.

    Args:
        message: what failed and what to check.
        reason: a short code, the key failures are counted by (``sandbox_died``,
            ``grader_timeout``, ``grader_crashed``, ``docker_unreachable``, ...).
    """

    def __init__(self, message: str, *, reason: str = "infra") -> None:
        super().__init__(message)
        self.reason = reason


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """A ' Did you mean: X?' suffix, or '' when nothing is close."""
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
    return (" Did you mean: " + ", ".join(repr(c) for c in close) + "?") if close else ""
