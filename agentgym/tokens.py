"""Token counting used by environments for budgets, memory triggers and token costs.

Environments never import a tokenizer. They take a ``count_tokens(text) -> int`` callable
at ``make`` time; the trainer passes its tokenizer's count so that budgets are exact. When
none is given, :func:`approx_tokens` is used:

    approx_tokens(text) = ceil(utf8_bytes(text) / 4)

Four bytes per token is the usual rule of thumb for English BPE vocabularies (GPT-2,
Llama, Qwen give 3.5-4.5 bytes per token on English prose; code and maths give fewer
bytes per token, so the approximation *under*-counts them by up to ~30%). Chat overhead
is counted as :data:`MESSAGE_OVERHEAD` tokens per message (role markers of a template).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agentgym.types import Message

TokenCounter = Callable[[str], int]

#: Tokens charged per chat message for the role header and separators of a chat template.
MESSAGE_OVERHEAD = 4


def approx_tokens(text: str) -> int:
    """Approximate token count: ceil(UTF-8 bytes / 4). See the module docstring."""
    n = len(text.encode("utf-8"))
    return (n + 3) // 4


def count_message_tokens(messages: Iterable[Message], count: TokenCounter = approx_tokens) -> int:
    """Tokens of a chat prompt: each message's content plus :data:`MESSAGE_OVERHEAD`."""
    return sum(count(m.content) + MESSAGE_OVERHEAD for m in messages)


def truncate_to_tokens(text: str, max_tokens: int, count: TokenCounter = approx_tokens) -> str:
    """The longest prefix of ``text`` whose token count is at most ``max_tokens``.

    Works with any monotone counter (binary search over character positions), so it
    needs no tokenizer. Cuts at a whitespace boundary where one is near.
    """
    if max_tokens <= 0:
        return ""
    if count(text) <= max_tokens:
        return text
    lo, hi = 0, len(text)
    while lo < hi:  # largest prefix length with count <= max_tokens
        mid = (lo + hi + 1) // 2
        if count(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    cut = text[:lo]
    space = cut.rfind(" ")
    if space > 0.8 * len(cut):
        cut = cut[:space]
    return cut


def counter_from_tokenizer(tokenizer: Any) -> TokenCounter:
    """Wrap a Hugging Face tokenizer (or anything with ``encode``) as a token counter."""

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    return count
