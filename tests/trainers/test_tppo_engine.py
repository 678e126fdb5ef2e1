"""What T-PPO needs of the rollout engine: a reply continued from a prefix, and the
decode statistics (utilization, tail time) that measure the long tail of a batch."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY_QWEN

from agentgym import Message, SamplingParams
from agentgym.generation import DecodeStats, GenerationRequest, HFEngine


@pytest.fixture(scope="module")
def engine():
    from agentgym.trainers.config import ModelConfig
    from agentgym.trainers.models import build_model_and_tokenizer

    torch.set_num_threads(1)
    model, tok = build_model_and_tokenizer(ModelConfig(preset_overrides=dict(TINY_QWEN)))
    return HFEngine(model, tok, seed=0)


def _req(text: str, max_tokens: int, *, seed: int = 1, temperature: float = 1.0, prefix=()):
    return GenerationRequest(
        (Message("user", text),),
        SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed),
        prefix=tuple(prefix),
    )


@pytest.mark.parametrize("decode", ["lean", "generate"])
def test_a_reply_continued_from_its_prefix_is_the_same_reply(engine, decode):
    from agentgym.generation import HFEngineOptions

    engine.options = HFEngineOptions(decode=decode)
    try:
        whole = engine.generate([_req("count", 9, temperature=0.0)])[0]
        ids = list(whole.token_ids)
        assert len(ids) == 9, "the tiny model ended early: pick another prompt"
        head = engine.generate([_req("count", 4, temperature=0.0)])[0]
        tail = engine.generate([_req("count", 5, temperature=0.0, prefix=head.token_ids)])[0]
    finally:
        engine.options = HFEngineOptions()
    assert list(head.token_ids) + list(tail.token_ids) == ids
    torch.testing.assert_close(
        torch.tensor(head.logprobs + tail.logprobs), torch.tensor(whole.logprobs), atol=1e-5, rtol=0
    )


def test_decode_utilization_and_tail_time_of_a_shrinking_batch(engine):
    before = engine.decode_stats.copy()
    # three rows stop after 2 tokens, one goes on to 12: the batch is mostly a tail
    out = engine.generate([_req(f"row {i}", 12 if i == 3 else 2, seed=i) for i in range(4)])
    got = engine.decode_stats.since(before)
    lengths = [c.num_tokens for c in out]
    assert lengths == [2, 2, 2, 12]  # no early eos with these seeds
    assert got.decode_steps == max(lengths)
    assert got.row_steps_used == sum(lengths)
    assert got.slot_steps == max(lengths) * 4
    assert got.utilization == pytest.approx(sum(lengths) / (4 * max(lengths)))
    assert 0 < got.tail_s < got.decode_s  # steps 3-12 had one row of four generating
    # a batch whose rows all run as long has no tail
    before = engine.decode_stats.copy()
    out = engine.generate([_req("same", 3, seed=s) for s in range(4)])
    got = engine.decode_stats.since(before)
    assert [c.num_tokens for c in out] == [3, 3, 3, 3]
    assert got.utilization == 1.0 and got.tail_s == 0.0


def test_decode_stats_from_reply_lengths():
    stats = DecodeStats()
    stats.add_lengths([1, 1, 1, 4], seconds=2.0)
    # 4 steps; at steps 1-3 one row of four still generates
    assert (stats.decode_steps, stats.row_steps_used, stats.slot_steps) == (4, 7, 16)
    assert stats.utilization == pytest.approx(7 / 16)
    assert stats.tail_s == pytest.approx(1.5) and stats.decode_s == 2.0
    stats.add_lengths([], seconds=1.0)
    assert stats.decode_s == 2.0
    later = stats.copy()
    later.add_lengths([2, 2], seconds=1.0)
    diff = later.since(stats)
    assert (diff.slot_steps, diff.tail_s, diff.utilization) == (4, 0.0, 1.0)
