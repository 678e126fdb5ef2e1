"""SFT step time: the quickstart's warm-start step as it was vs as it is now.

Three kinds of step on the quickstart's batches (``configs/quickstart_sft.yaml``):

* ``old``: random batches, each one padded block with an attention mask and full logits;
* ``padded``: :func:`agentgym.trainers.sft.batch_loss` without packing: one row per
  example, padded on the right, no attention mask, the output projection only where there
  is a label (``length_groups`` micro-batches, batches drawn from ``group_by_length``
  sorted groups when the config sets them);
* ``new``: the config's step: the same, with the examples packed into rows of
  ``train.pack_width`` tokens (:mod:`agentgym.trainers.token_rows`).

On one batch all three compute the same loss and gradient (checked here, and in
tests/trainers/test_sft_batches.py and test_sft_packing.py); what differs is how much
padding they carry. The benchmark times the kinds **in alternation** (the order reversed
every step), so that a shared machine's changing load hits them alike, and reports the
median wall-clock and CPU seconds per step of each, their ratios, and their padding shares.

Run: ``python -m agentgym.benchmarks.perf.sft [--steps 24] [--pack-width W] [--groups M]
[--group-by-length K]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from agentgym import load_config


def _old_step(model: Any, items: list[tuple[list[int], list[int]]], pad: int) -> float:
    """The step as it was: one right-padded batch, attention mask, full logits."""
    import torch

    width = max(len(p) + len(r) for p, r in items)
    ids = torch.full((len(items), width), pad, dtype=torch.long)
    att = torch.zeros((len(items), width), dtype=torch.long)
    labels = torch.full((len(items), width), -100, dtype=torch.long)
    for i, (p, r) in enumerate(items):
        seq = p + r
        ids[i, : len(seq)] = torch.tensor(seq)
        att[i, : len(seq)] = 1
        labels[i, len(p) : len(seq)] = torch.tensor(r)
    logits = model(input_ids=ids, attention_mask=att, use_cache=False).logits[:, :-1].float()
    targets = labels[:, 1:]
    mask = targets != -100
    nll = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.clamp(min=0).reshape(-1), reduction="none"
    ).view_as(targets)
    loss = (nll * mask).sum() / mask.sum()
    loss.backward()
    return float(loss.detach())


def run(
    quick: bool = False,
    steps: int | None = None,
    groups: int | None = None,
    threads: int = 2,
    group_by_length: int | None = None,
    pack_width: int | None = None,
) -> dict[str, Any]:
    """Time ``steps`` steps of each kind (after one warm-up each); see the module doc."""
    steps = steps or (6 if quick else 24)
    import torch

    from agentgym.generation import encode_prompt
    from agentgym.trainers import length_groups, packed_rows
    from agentgym.trainers.sft import (
        SFTConfig,
        batch_loss,
        build_model_and_examples,
        epoch_batches,
    )

    torch.set_num_threads(threads)
    cfg = load_config(SFTConfig, "configs/quickstart_sft.yaml", ["data.num_tasks=2000"])
    groups = groups or cfg.train.length_groups
    grouping = cfg.train.group_by_length if group_by_length is None else group_by_length
    width = cfg.train.pack_width if pack_width is None else pack_width
    model, tok, examples = build_model_and_examples(cfg)
    eos = [int(tok.eos_token_id)]
    encoded = [
        (encode_prompt(tok, m), tok(r, add_special_tokens=False)["input_ids"] + eos)
        for m, r in examples
    ]
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    lengths = [len(p) + len(r) for p, r in encoded]
    size = cfg.train.batch_size
    old_batches = [[encoded[i] for i in b] for b in epoch_batches(lengths, size, random.Random(0))]
    new_batches = [
        [encoded[i] for i in b]
        for b in epoch_batches(lengths, size, random.Random(0), grouping)
        if len(b) == size
    ]
    batches = old_batches[: steps + 1]
    model.train()
    kinds: dict[str, Callable[[list[Any]], float]] = {
        "old": lambda b: _old_step(model, b, pad),
        "padded": lambda b: batch_loss(model, b, pad, groups),
        "new": lambda b: batch_loss(model, b, pad, groups, pack_width=width),
    }

    # the same gradient (first batch)
    grads: dict[str, list[Any]] = {}
    losses: dict[str, float] = {}
    for kind, step in kinds.items():
        model.zero_grad()
        losses[kind] = step(batches[0])
        grads[kind] = [p.grad.clone() for p in model.parameters()]
    grad_gap = max(
        float((a - b).abs().max())
        for kind in ("padded", "new")
        for a, b in zip(grads[kind], grads["old"], strict=True)
    )

    wall: dict[str, list[float]] = {k: [] for k in kinds}
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    for k in range(steps):
        order = list(kinds) if k % 2 == 0 else list(kinds)[::-1]
        for kind in order:
            model.zero_grad()
            batch = old_batches[1 + k] if kind == "old" else new_batches[k]
            t0, c0 = time.perf_counter(), time.process_time()
            kinds[kind](batch)
            wall[kind].append(time.perf_counter() - t0)
            cpu[kind].append(time.process_time() - c0)

    def padding(bs: list[Any]) -> float:
        real = sum(len(p) + len(r) for b in bs for p, r in b)
        return round(1 - real / sum(max(len(p) + len(r) for p, r in b) * len(b) for b in bs), 3)

    med = {
        f"{m}_{kind}_s": statistics.median(v[kind])
        for m, v in (("wall", wall), ("cpu", cpu))
        for kind in v
    }
    packed_share = (
        statistics.mean(packed_rows(b, width, pad).padding_share for b in new_batches[:steps])
        if width
        else padding([part for b in new_batches[:steps] for part in length_groups(b, groups)])
    )
    return {
        "title": "SFT step: one padded batch with a mask (old) vs agentgym sft's step (new)",
        "steps": steps,
        "batch_size": cfg.train.batch_size,
        "group_by_length": grouping,
        "length_groups": groups,
        "pack_width": width,
        "threads": threads,
        "padding_share_old": padding(old_batches[1 : steps + 1]),
        "padding_share_padded": padding(new_batches[:steps]),
        "padding_share_new": round(packed_share, 3),
        "loss_old": round(losses["old"], 6),
        "loss_new": round(losses["new"], 6),
        "max_grad_difference": grad_gap,
        **{k: round(v, 4) for k, v in med.items()},
        "speedup_wall": round(med["wall_old_s"] / med["wall_new_s"], 2),
        "speedup_cpu": round(med["cpu_old_s"] / med["cpu_new_s"], 2),
        "packing_vs_padded_wall": round(med["wall_padded_s"] / med["wall_new_s"], 2),
        "packing_vs_padded_cpu": round(med["cpu_padded_s"] / med["cpu_new_s"], 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--groups", type=int, default=None, help="micro-batches per batch")
    ap.add_argument("--group-by-length", type=int, default=None, help="batches per sorted group")
    ap.add_argument("--pack-width", type=int, default=None, help="packed row width (0: off)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    result = run(
        args.quick, args.steps, args.groups, args.threads, args.group_by_length, args.pack_width
    )
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
