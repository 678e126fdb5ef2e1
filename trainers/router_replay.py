"""Router replay for MoE models: the experts the rollout chose, replayed by the learner.

In a mixture-of-experts layer the router picks the top-k experts of every token from
scores that the rollout engine and the learner compute with different kernels, batch
shapes and precision. A near tie then goes one way in the engine and the other in the
learner: the token's log-prob under the learner is computed by other experts than the
ones that produced it, the importance ratio drifts, and MoE RL training is known to
collapse from it. Router replay removes that source of mismatch:

* :class:`RoutingRecorder` (engine side) keeps, for every request, the expert indices each
  router chose at every position the engine ran: the prompt (prefill), then each reply
  token it fed back. The HF engine attaches them to the completion
  (``Completion.routing``, ``[layers, positions, k]``).
* :class:`RoutingReplay` (learner side) makes each router use the given indices instead
  of its own top-k. The gate's scores are still computed from the learner's hidden states
  and the chosen experts' weights are taken from them (``scores[replayed]``, normalised and
  scaled as the router does), so the gate keeps its gradient; only the *choice* is the
  engine's. Positions without a recorded choice (``-1``, e.g. padding) keep the router's
  own top-k.

Routers are found by shape: modules named ``...gate`` that have ``top_k`` and a
``weight`` of ``[num_experts, hidden]`` and return ``(logits, weights, indices)``
(DeepSeek-V3's ``TopkRouter`` in transformers 5). The replay rebuilds the weights with the
router's own settings (sigmoid scores, ``norm_topk_prob``, ``routed_scaling_factor``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from agentgym import ConfigError
from agentgym.generation import moe_routers


class RoutingReplay:
    """Makes the model's routers use given expert indices (see the module docstring).

    Use as a context manager around training forwards; before each forward call
    :meth:`set` with ``[layers, tokens, k]`` indices aligned with the forward's tokens
    (flattened batch-major, as the router sees them), ``-1`` where the router should
    choose itself. Counts how many replayed positions differ from the router's own choice.
    """

    def __init__(self, model: nn.Module) -> None:
        self.routers = moe_routers(model)
        if not self.routers:
            raise ConfigError(
                "algorithm.router_replay is on but the model has no MoE router (a dense model "
                "has no expert choice to replay); turn it off."
            )
        self._originals: list[Any] = []
        self._indices: Tensor | None = None
        #: positions replayed, and among them those where the router would have chosen
        #: another set of experts (summed over layers)
        self.replayed = 0
        self.changed = 0

    def __enter__(self) -> RoutingReplay:
        for i, router in enumerate(self.routers):
            self._originals.append(router.forward)
            router.forward = self._forward(i, router, router.forward)
        return self

    def __exit__(self, *exc: object) -> None:
        for router, original in zip(self.routers, self._originals, strict=True):
            router.forward = original
        self._originals.clear()
        self._indices = None

    def set(self, indices: Tensor | None) -> None:
        """The choices for the next forward: ``[layers, tokens, k]`` or ``None`` (own)."""
        self._indices = indices

    def _forward(self, i: int, router: nn.Module, original: Any):
        def forward(hidden_states: Tensor) -> tuple[Tensor, Tensor, Tensor]:
            logits, weights, own = original(hidden_states)
            if self._indices is None:
                return logits, weights, own
            given = self._indices[i].to(own.device, own.dtype)
            if given.shape != own.shape:
                raise RuntimeError(
                    f"router replay: {tuple(given.shape)} recorded choices for "
                    f"{tuple(own.shape)} tokens in router {i}"
                )
            known = (given >= 0).all(-1, keepdim=True)
            chosen = torch.where(known, given, own)
            scores = logits.sigmoid()
            w = scores.gather(1, chosen)
            if getattr(router, "norm_topk_prob", False):
                w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
            w = w * getattr(router, "routed_scaling_factor", 1.0)
            with torch.no_grad():
                n = int(known.sum())
                self.replayed += n
                same = (chosen.sort(-1).values == own.sort(-1).values).all(-1, keepdim=True)
                self.changed += int((known & ~same).sum())
            return logits, w.to(weights.dtype), chosen

        return forward


def pad_routing(
    parts: Sequence[Tensor | None], width: int, *, left: bool, layers: int, k: int
) -> Tensor:
    """Stack per-row ``[layers, n, k]`` choices into ``[layers, rows, width, k]``, padded
    with ``-1`` (on the left for prompts, on the right for replies)."""
    out = torch.full((layers, len(parts), width, k), -1, dtype=torch.int32)
    for row, p in enumerate(parts):
        if p is None or p.numel() == 0:
            continue
        n = min(p.shape[1], width)
        if left:
            out[:, row, width - n :] = p[:, -n:]
        else:
            out[:, row, :n] = p[:, :n]
    return out


def flat(indices: Tensor) -> Tensor:
    """``[layers, rows, positions, k]`` to the router's token order ``[layers, rows * positions, k]``."""
    layers, rows, pos, k = indices.shape
    return indices.reshape(layers, rows * pos, k)
