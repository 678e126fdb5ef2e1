"""MoE routing as the engine saw it: each router's expert choices, recorded while generating.

:class:`RoutingRecorder` keeps, for every request, the expert indices each router chose at
every position the engine ran (the prompt, then each reply token fed back); the HF engine
attaches them to the completion (``Completion.routing``, ``[layers, positions, k]``), and
the trainer's router replay (``agentgym.trainers``) makes the learner's routers use them.
Routers are found by shape (:func:`moe_routers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn


def moe_routers(model: nn.Module) -> list[nn.Module]:
    """The model's MoE routers, in layer order (empty for a dense model)."""
    out = []
    for name, module in model.named_modules():
        if (
            name.endswith("gate")
            and hasattr(module, "top_k")
            and isinstance(getattr(module, "weight", None), torch.Tensor)
            and module.weight.dim() == 2
        ):
            out.append(module)
    return out


class RoutingRecorder:
    """Records every router's choices during generation (see the module docstring).

    The decode loop calls :meth:`capture` around each forward and tells it how the
    forward's flattened tokens map to requests; :meth:`routing` gives a request's
    ``[layers, positions, k]`` indices at the end.
    """

    def __init__(self, model: nn.Module, num_requests: int) -> None:
        self.routers = moe_routers(model)
        self._calls: list[Tensor | None] = [None] * len(self.routers)
        self._handles: list[Any] = []
        self._per_request: list[list[Tensor]] = [[] for _ in range(num_requests)]
        self._prompt: list[Tensor | None] = [None] * num_requests

    def __enter__(self) -> RoutingRecorder:
        for i, router in enumerate(self.routers):
            self._handles.append(router.register_forward_hook(self._hook(i)))
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _hook(self, i: int):
        def hook(_module: nn.Module, _inputs: Any, output: Any) -> None:
            self._calls[i] = output[2].detach().to("cpu", torch.int32)

        return hook

    def _take(self) -> Tensor:
        """The last forward's indices of every router: ``[layers, tokens, k]``."""
        if any(c is None for c in self._calls):
            raise RuntimeError("a router did not run in the last forward")
        out = torch.stack([c for c in self._calls if c is not None])
        self._calls = [None] * len(self.routers)
        return out

    def prefill(self, rows: int, width: int, source: Sequence[int], lengths: Sequence[int]) -> None:
        """After a prefill of ``rows`` left-padded prompts of ``width``: request ``r`` read
        prompt row ``source[r]``, whose last ``lengths[r]`` positions are its prompt."""
        taken = self._take().view(len(self.routers), rows, width, -1)
        for r, (u, n) in enumerate(zip(source, lengths, strict=True)):
            self._prompt[r] = taken[:, u, width - n :]

    def step(self, requests: Sequence[int], live: Sequence[bool]) -> None:
        """After a decode step that fed one token to each batch row: row ``j`` belongs
        to request ``requests[j]``; only rows still generating keep their choice."""
        taken = self._take()
        for j, (r, on) in enumerate(zip(requests, live, strict=True)):
            if on:
                self._per_request[r].append(taken[:, j])

    def routing(self, request: int, keep_tokens: int) -> Tensor:
        """``[layers, prompt + keep_tokens - 1, k]``: the prompt's positions and those of
        the first ``keep_tokens - 1`` reply tokens (the last one was never fed)."""
        prompt = self._prompt[request]
        if prompt is None:
            raise RuntimeError("routing() before prefill()")
        fed = self._per_request[request][: max(0, keep_tokens - 1)]
        if not fed:
            return prompt.clone()
        return torch.cat([prompt, torch.stack(fed, dim=1)], dim=1)


def router_shape(model: nn.Module) -> tuple[int, int]:
    """``(layers with a router, top-k)`` of an MoE model."""
    routers = moe_routers(model)
    return len(routers), int(routers[0].top_k) if routers else 0
