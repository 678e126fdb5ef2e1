"""Token rows: ``(prompt ids, reply ids)`` pairs as the learner's micro-batches
(:class:`~agentgym.trainers.batch.TokenRows`, trained at the reply tokens; SFT's, and
any loop that trains on whole examples).

A batch becomes micro-batches in one of three ways (:func:`token_rows`):

* one row per example, right-padded to the batch's longest (:func:`pad_rows`);
* the batch sorted by length and cut into ``groups`` runs, each padded to its own
  longest (:func:`length_groups`): the gradient of the whole batch, less padding;
* packed: several examples share one row, each attending only to itself
  (:func:`packed_rows`).

Packing: an SFT batch of examples of different lengths, padded to its longest, is a
third padding on the quickstart's data. Packed, the examples are laid end to end in rows
of at most ``width`` tokens (:func:`pack_rows`, first-fit decreasing), and each example's
position ids start again at 0. A Hugging Face causal LM given ``position_ids`` and no
attention mask reads a restart of the positions as the start of a new sequence and masks
attention across it (transformers' packed-sequence mask), so every token sees the same
context as in a row of its own: loss and gradient are those of the padded batch, up to
float rounding (tests/trainers/test_sft_packing.py).

A wider row wastes less at its end but attends over more (masked) positions; on the
quickstart's examples (51 tokens on average, 78 at most) ``width`` 128 leaves ~4% padding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentgym.trainers.batch import TokenRows

#: an example: its prompt's token ids and its reply's (trained on)
Item = tuple[list[int], list[int]]


def pack_rows(lengths: Sequence[int], width: int) -> list[list[int]]:
    """Indices of ``lengths`` grouped into rows of at most ``width`` tokens each.

    First-fit decreasing: longest first, each into the first row it fits, a new row
    when none has room. An example longer than ``width`` gets a row of its own. The
    result depends only on ``lengths`` (ties keep index order).
    """
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        n = lengths[i]
        for r, free in enumerate(room):
            if free >= n:
                rows[r].append(i)
                room[r] -= n
                break
        else:
            rows.append([i])
            room.append(width - n)
    return rows


@dataclass(frozen=True)
class Packed:
    """A packed batch: ``input_ids``, ``position_ids`` (restarting at 0 for each example
    and for the padding at a row's end) and ``labels`` (the reply tokens, -100 elsewhere),
    all ``[rows, width]``; ``tokens``: the examples' tokens in it."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    labels: torch.Tensor
    tokens: int

    @property
    def padding_share(self) -> float:
        """Share of the row cells that hold no example."""
        return 1.0 - self.tokens / self.input_ids.numel()


def packed_rows(items: Sequence[Item], width: int, pad: int) -> Packed:
    """``(prompt ids, reply ids)`` pairs packed into rows (:func:`pack_rows`).

    The rows are as wide as the fullest one (at most ``width``, or the longest example
    when that is longer). Labels are the reply tokens; the model's output at position
    ``t`` predicts the label at ``t + 1``. An example's first token never has a label
    (as in a row of its own, where nothing predicts it), so no prediction crosses from
    one example into the next.
    """
    lengths = [len(p) + len(r) for p, r in items]
    rows = pack_rows(lengths, width)
    w = max(sum(lengths[i] for i in row) for row in rows)
    ids = torch.full((len(rows), w), pad, dtype=torch.long)
    pos = torch.zeros((len(rows), w), dtype=torch.long)
    labels = torch.full((len(rows), w), -100, dtype=torch.long)
    for r, row in enumerate(rows):
        at = 0
        for i in row:
            prompt, reply = items[i]
            n = lengths[i]
            ids[r, at : at + n] = torch.tensor(prompt + reply, dtype=torch.long)
            pos[r, at : at + n] = torch.arange(n)
            labels[r, at + len(prompt) : at + n] = torch.tensor(reply, dtype=torch.long)
            labels[r, at] = -100
            at += n
        pos[r, at:] = torch.arange(w - at)  # the row's padding: a "sequence" of its own
    return Packed(ids, pos, labels, tokens=sum(lengths))


def pad_rows(items: Sequence[Item], pad: int) -> TokenRows:
    """Right-padded rows and their labels (-100 outside the replies)."""
    width = max(len(p) + len(r) for p, r in items)
    ids = torch.full((len(items), width), pad, dtype=torch.long)
    labels = torch.full((len(items), width), -100, dtype=torch.long)
    for i, (p, r) in enumerate(items):
        seq = p + r
        ids[i, : len(seq)] = torch.tensor(seq)
        labels[i, len(p) : len(seq)] = torch.tensor(r)
    return TokenRows(ids, labels)


def length_groups(items: Sequence[Item], groups: int) -> list[list[Item]]:
    """``items`` sorted by length and cut into at most ``groups`` runs of similar length."""
    ordered = sorted(items, key=lambda it: len(it[0]) + len(it[1]))
    size = math.ceil(len(ordered) / max(1, groups))
    return [ordered[k : k + size] for k in range(0, len(ordered), size)]


def token_rows(
    items: Sequence[Item], pad: int, groups: int = 1, pack_width: int = 0
) -> list[TokenRows]:
    """A batch's micro-batches: ``groups`` length-sorted runs of padded rows, or with
    ``pack_width > 0`` the examples packed into rows of that many tokens (``groups`` is
    then unused)."""
    if pack_width > 0:
        packed = packed_rows(items, pack_width, pad)
        return [TokenRows(packed.input_ids, packed.labels, packed.position_ids)]
    return [pad_rows(part, pad) for part in length_groups(items, groups)]
