"""Observation and action spaces for text environments.

Gymnasium's ``spaces.Text`` only admits strings over a fixed character set, which rejects
ordinary unicode (accents, maths symbols, emoji, code). agentgym's spaces admit any text
within a length bound:

* :class:`UnicodeText` – the action space: one assistant reply.
* :class:`ChatObservation` – the observation space: a list of :class:`~agentgym.types.Message`.

Both sample reproducibly from their own seeded generator, so Gymnasium's ``check_env``
(which steps with ``action_space.sample()``) works on every agentgym environment, and an
environment must treat such random text as a malformed action, never crash on it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from agentgym.types import ROLES, Message

# Characters random samples are drawn from: ASCII letters and punctuation, whitespace, and
# a few multi-byte characters, so that envs see unicode in their checks.
_SAMPLE_CHARS = np.array(
    list(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        " \n\t.,;:!?()[]{}<>=+-*/\\_'\"#$%&|~^`@"
        "éüßøçñ√π∑∞≤≥→λ中文🙂"
    )
)


class UnicodeText(spaces.Space[str]):
    """Any ``str`` of at most ``max_length`` characters (``None``: no bound)."""

    def __init__(self, max_length: int | None = 200_000, *, seed: int | None = None) -> None:
        if max_length is not None and max_length < 1:
            raise ValueError(f"max_length must be >= 1 or None, got {max_length}.")
        self.max_length = max_length
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random string of 0 to 64 characters (capped by ``max_length``)."""
        hi = 64 if self.max_length is None else min(64, self.max_length)
        n = int(self.np_random.integers(0, hi + 1))
        return "".join(self.np_random.choice(_SAMPLE_CHARS, size=n).tolist())

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and (self.max_length is None or len(x) <= self.max_length)

    def __repr__(self) -> str:
        return f"UnicodeText(max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, UnicodeText) and other.max_length == self.max_length

    def to_jsonable(self, sample_n: Any) -> list[str]:
        return list(sample_n)

    def from_jsonable(self, sample_n: list[str]) -> list[str]:
        return list(sample_n)


class ChatObservation(spaces.Space[list]):
    """A list of 1..``max_messages`` :class:`Message` s, each at most ``max_chars`` long."""

    def __init__(
        self,
        max_messages: int = 1024,
        max_chars: int | None = 1_000_000,
        *,
        seed: int | None = None,
    ) -> None:
        self.max_messages = max_messages
        self.max_chars = max_chars
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> list[Message]:
        """A random conversation: a system message, then alternating user/assistant turns."""
        n = int(self.np_random.integers(1, min(6, self.max_messages) + 1))
        text = UnicodeText(self.max_chars or 64)
        text._np_random = self.np_random  # share this space's generator
        msgs = [Message("system", text.sample())]
        for i in range(1, n):
            msgs.append(Message("user" if i % 2 else "assistant", text.sample()))
        return msgs

    def contains(self, x: Any) -> bool:
        if not isinstance(x, list) or not 1 <= len(x) <= self.max_messages:
            return False
        for m in x:
            if not isinstance(m, Message) or m.role not in ROLES or not isinstance(m.content, str):
                return False
            if self.max_chars is not None and len(m.content) > self.max_chars:
                return False
        return True

    def __repr__(self) -> str:
        return f"ChatObservation(max_messages={self.max_messages}, max_chars={self.max_chars})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, ChatObservation)
            and other.max_messages == self.max_messages
            and other.max_chars == self.max_chars
        )

    def to_jsonable(self, sample_n: Any) -> list[list[dict[str, str]]]:
        return [[m.to_dict() for m in obs] for obs in sample_n]

    def from_jsonable(self, sample_n: list[list[dict[str, str]]]) -> list[list[Message]]:
        return [[Message.from_dict(m) for m in obs] for obs in sample_n]
