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

import re
from collections.abc import Callable, Iterable
from typing import Any

from agentgym.types import Message

TokenCounter = Callable[[str], int]

#: Tokens charged per chat message for the role header and separators of a chat template.
MESSAGE_OVERHEAD = 4


def approx_tokens(text: str) -> int:
    """Approximate token count: ceil(UTF-8 bytes / 4). See the module docstring.

    A lone surrogate (which JSON from an HTTP endpoint can decode to) counts as the three
    bytes it would take, instead of failing to encode.
    """
    n = len(text.encode("utf-8", "surrogatepass"))
    return (n + 3) // 4


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, so it encodes as UTF-8.

    A Python ``str`` holds surrogates only unpaired (a JSON ``"\\ud800"`` decodes to
    one); they cannot be written, hashed by tokenizers or sent anywhere. Environments
    clean every action with this before they look at it.
    """
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


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


class TokenizerCounter:
    """A tokenizer's exact token count as a ``count_tokens`` callable.

    Two counters of the same tokenizer object compare equal, so env configurations
    that hold one (``gym.make(..., count_tokens=...)``) stay equal from one call of
    :func:`counter_from_tokenizer` to the next, and reusable envs can be matched to them.
    A Hugging Face fast tokenizer is asked through its Rust backend directly (the same
    ids as ``encode`` without special tokens, with less Python around it).
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._backend = backend if callable(getattr(backend, "encode", None)) else None

    def __call__(self, text: str) -> int:
        text = clean_text(text)
        if self._backend is not None:
            return len(self._backend.encode(text, add_special_tokens=False).ids)
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenizerCounter) and other.tokenizer is self.tokenizer

    def __hash__(self) -> int:
        return id(self.tokenizer)

    def __repr__(self) -> str:
        return f"TokenizerCounter({type(self.tokenizer).__name__})"


def counter_from_tokenizer(tokenizer: Any) -> TokenCounter:
    """Wrap a Hugging Face tokenizer (or anything with ``encode``) as a token counter."""
    return TokenizerCounter(tokenizer)
