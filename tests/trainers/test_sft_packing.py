"""SFT sequence packing: rows hold every example once within their width, and a packed
batch gives the padded batch's loss and gradient (no attention across examples)."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import TINY_QWEN

from agentgym.generation import build_preset
from agentgym.trainers.sft import batch_loss
from agentgym.trainers.token_rows import pack_rows, packed_rows


def _items(n: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(seed)
    return [
        (
            [rng.randrange(3, 200) for _ in range(rng.randint(2, 9))],
            [rng.randrange(3, 200) for _ in range(rng.randint(1, 12))],
        )
        for _ in range(n)
    ]


def test_pack_rows_places_every_example_once_within_the_width():
    rng = random.Random(1)
    lengths = [rng.randint(5, 40) for _ in range(200)]
    rows = pack_rows(lengths, 64)
    assert sorted(i for row in rows for i in row) == list(range(200))
    assert all(sum(lengths[i] for i in row) <= 64 for row in rows)
    # first-fit decreasing wastes little: within 10% of the volume bound
    assert len(rows) <= 1.1 * sum(lengths) / 64 + 1
    assert pack_rows(lengths, 64) == rows  # deterministic
    # an example wider than the row gets one of its own
    assert pack_rows([10, 100, 20], 32) == [[1], [2, 0]]


def test_packed_rows_layout():
    items = [([1, 2], [3, 4, 5]), ([6], [7]), ([8, 9, 10], [11])]
    p = packed_rows(items, 8, pad=0)
    # longest first: item 0 (5 tokens); item 2 (4) does not fit beside it, item 1 (2)
    # does; the rows are as wide as the fullest (7)
    assert p.input_ids.tolist() == [[1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 0, 0, 0]]
    assert p.position_ids.tolist() == [[0, 1, 2, 3, 4, 0, 1], [0, 1, 2, 3, 0, 1, 2]]
    assert p.labels.tolist() == [
        [-100, -100, 3, 4, 5, -100, 7],
        [-100, -100, -100, 11, -100, -100, -100],
    ]
    assert p.tokens == 11 and p.padding_share == pytest.approx(3 / 14)


def test_packed_batch_matches_the_padded_batch(tokenizer):
    """Attention must not cross examples: if it did, the logits -- and so the loss and
    the gradient -- would differ from those of one row per example."""
    model = build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN)
    items = _items(9)
    pad = tokenizer.pad_token_id
    model.zero_grad()
    ref = batch_loss(model, items, pad)
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    for width in (16, 24, 64):
        assert len(pack_rows([len(p) + len(r) for p, r in items], width)) < len(items)
        model.zero_grad()
        loss = batch_loss(model, items, pad, pack_width=width)
        assert loss == pytest.approx(ref, abs=1e-5), width
        for n, p in model.named_parameters():
            torch.testing.assert_close(p.grad, want[n], atol=1e-6, rtol=1e-4, msg=f"{n} ({width})")
