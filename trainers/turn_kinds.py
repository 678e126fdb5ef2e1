"""Credit by turn kind: what an update did to the act turns and to the memory-summary turns.

One terminal reward trains every turn of a multi-conversation episode, summaries included
(SUPO's summaries-as-actions). Whether the summaries are in fact being trained shows in
two figures per kind (``act``, ``summary``), logged under ``kinds/``:

* ``kinds/<kind>_tokens`` / ``kinds/<kind>_turns``: the trained tokens and turns of that
  kind in the batch (from the samples; free);
* ``kinds/<kind>_logprob_gain``: the mean, over the kind's trained tokens, of the change of
  each token's log-prob across the whole update (after its last optimizer step minus
  before its first), signed by the token's advantage (``+`` where the advantage is
  positive, ``-`` where negative, tokens with a zero advantage left out). Positive: the
  update moved that kind of turn the way its rewards asked. This costs a no-gradient
  forward pass over the batch before and one after the update (``algorithm.kind_stats``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from agentgym import TURN_KINDS
from agentgym.trainers.batch import MicroBatch, Sample


def kind_counts(samples: Sequence[Sample]) -> dict[str, float]:
    """``kinds/<kind>_tokens`` and ``kinds/<kind>_turns`` of the trained samples."""
    out: dict[str, float] = {}
    for kind in TURN_KINDS:
        mine = [s for s in samples if s.kind == kind]
        out[f"kinds/{kind}_turns"] = float(len(mine))
        out[f"kinds/{kind}_tokens"] = float(sum(len(s.response_ids) for s in mine))
    return out


def logprob_gain(
    before: Sequence[Sequence[torch.Tensor]],
    after: Sequence[Sequence[torch.Tensor]],
    full: Sequence[Sequence[MicroBatch]],
    kinds_of: Callable[[int, MicroBatch], list[str]],
) -> dict[str, float]:
    """``kinds/<kind>_logprob_gain`` from the targets' log-probs before and after an update.

    Args:
        before / after: per mini-batch, per micro-batch, ``[B, R]`` log-probs.
        full: the mini-batches' micro-batches (their loss masks and advantages).
        kinds_of: the turn kind of each row of micro-batch ``mb`` of mini-batch ``m``.
    """
    sums = {k: 0.0 for k in TURN_KINDS}
    counts = {k: 0.0 for k in TURN_KINDS}
    for m, mbs in enumerate(full):
        for j, mb in enumerate(mbs):
            adv = mb.token_advantages if mb.token_advantages is not None else mb.advantages[:, None]
            sign = torch.sign(adv.expand_as(mb.loss_mask).cpu()) * mb.loss_mask.cpu()
            gain = (after[m][j].cpu() - before[m][j].cpu()) * sign
            for row, kind in enumerate(kinds_of(m, mb)):
                sums[kind] += float(gain[row].sum())
                counts[kind] += float(sign[row].abs().sum())
    return {
        f"kinds/{k}_logprob_gain": sums[k] / counts[k] if counts[k] else float("nan")
        for k in TURN_KINDS
    }
