"""Sequence packing: several examples share one row, each attending only to itself.

An SFT batch of examples of different lengths, padded to its longest, is a third padding
on the quickstart's data. Packed, the examples are laid end to end in rows of at most
``width`` tokens (:func:`pack_rows`, first-fit decreasing), and each example's position
ids start again at 0 (:func:`packed_rows`). A Hugging Face causal LM given ``position_ids``
and no attention mask reads a restart of the positions as the start of a new sequence and
masks attention across it (transformers' packed-sequence mask), so every token sees the
same context as in a row of its own: loss and gradient are those of the padded batch, up
to float rounding (tests/trainers/test_sft_packing.py).

A wider row wastes less at its end but attends over more (masked) positions; on the
quickstart's examples (51 tokens on average, 78 at most) ``width`` 128 leaves ~4% padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


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


def packed_rows(items: Sequence[tuple[list[int], list[int]]], width: int, pad: int) -> Packed:
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
