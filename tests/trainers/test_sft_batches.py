"""SFT batches: the cheaper step computes the textbook step's loss and gradient, and
length-grouped batches cover every example once per epoch with less padding."""

from __future__ import annotations

import random

import torch
from conftest import TINY_QWEN

from agentgym.generation import build_preset
from agentgym.trainers.sft import batch_loss, epoch_batches
from agentgym.trainers.token_rows import length_groups


def _textbook(model, items, pad):
    """One left-aligned padded batch with an attention mask and full logits."""
    width = max(len(p) + len(r) for p, r in items)
    ids = torch.full((len(items), width), pad)
    att = torch.zeros((len(items), width), dtype=torch.long)
    labels = torch.full((len(items), width), -100)
    for i, (p, r) in enumerate(items):
        ids[i, : len(p) + len(r)] = torch.tensor(p + r)
        att[i, : len(p) + len(r)] = 1
        labels[i, len(p) : len(p) + len(r)] = torch.tensor(r)
    logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]
    targets = labels[:, 1:]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100
    )


def test_batch_loss_matches_one_padded_batch(tokenizer):
    model = build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN)
    rng = random.Random(0)
    items = [
        (
            [rng.randrange(3, 200) for _ in range(rng.randint(2, 9))],
            [rng.randrange(3, 200) for _ in range(rng.randint(1, 12))],
        )
        for _ in range(7)
    ]
    pad = tokenizer.pad_token_id
    model.zero_grad()
    ref = _textbook(model, items, pad)
    ref.backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    for groups in (1, 3, 7):
        model.zero_grad()
        loss = batch_loss(model, items, pad, groups)
        assert abs(loss - float(ref.detach())) < 1e-5, groups
        for n, p in model.named_parameters():
            torch.testing.assert_close(p.grad, want[n], atol=1e-6, rtol=1e-4, msg=f"{n} ({groups})")
    # evaluation only: no gradient
    model.zero_grad()
    batch_loss(model, items, pad, 2, backward=False)
    assert all(p.grad is None for p in model.parameters())


def test_length_groups_sort_and_cover_the_batch():
    items = [([0] * n, [1]) for n in (5, 1, 4, 2, 3)]
    parts = length_groups(items, 2)
    assert [[len(p) for p, _ in part] for part in parts] == [[1, 2, 3], [4, 5]]


def test_epoch_batches_cover_every_example_once_with_less_padding():
    rng = random.Random(0)
    lengths = [rng.randint(10, 80) for _ in range(1000)]

    def padding(batches):
        return sum(
            max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in batches
        )

    plain = epoch_batches(lengths, 32, random.Random(1))
    grouped = epoch_batches(lengths, 32, random.Random(1), group_by_length=8)
    for batches in (plain, grouped):
        assert sorted(i for b in batches for i in b) == list(range(1000))
        assert all(len(b) <= 32 for b in batches)
    assert padding(grouped) < 0.2 * padding(plain)
    # the grouped epoch is not simply sorted: short and long batches alternate
    maxima = [max(lengths[i] for i in b) for b in grouped]
    assert maxima != sorted(maxima)
