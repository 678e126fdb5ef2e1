from __future__ import annotations

from agentgym.spaces import ChatObservation, UnicodeText
from agentgym.types import Message


def test_unicode_text_accepts_ordinary_unicode_and_bounds_length():
    space = UnicodeText(max_length=10)
    assert "héllo √2 🙂" in space
    assert "x" * 11 not in space
    assert 42 not in space


def test_unicode_text_samples_are_reproducible_and_contained():
    a, b = UnicodeText(seed=7), UnicodeText(seed=7)
    samples = [a.sample() for _ in range(20)]
    assert samples == [b.sample() for _ in range(20)]
    assert all(s in a for s in samples)
    assert len(set(samples)) > 10


def test_chat_observation_contains_only_message_lists():
    space = ChatObservation(max_messages=3, max_chars=20)
    assert [Message("system", "s"), Message("user", "u")] in space
    assert [] not in space
    assert [{"role": "user", "content": "u"}] not in space
    assert [Message("user", "x" * 21)] not in space
    assert [Message("user", "u")] * 4 not in space
    space.seed(0)
    assert all(space.sample() in space for _ in range(10))
