"""The adapter sync between a learner and an engine: each engine worker gets what it serves.

After every update the engine must sample from the new adapter. Sending the whole adapter
to every worker (a file written each step, or a broadcast) costs what the adapter weighs
on every rank -- 9.9 GB for DeepSeek-V3 at rank 16, with every expert's rows -- while a
worker serves a small part of it: the layers of its pipeline stage, and under expert
parallelism its own experts. :class:`AdapterSync` moves only that part:

1. the learner says what this rank holds (:meth:`AdapterSource.adapter_shards`: each
   adapter tensor whole, or, for peft's fused-expert tensors, the rows of some experts --
   how it came to hold them is the learner's strategy, which the sync does not know);
2. the engine says what this rank's worker serves (``engine.adapter_needs``: whole
   tensors of its stage, expert rows under expert parallelism -- which engine it is, the
   learner does not know);
3. every rank learns everyone's holdings and needs (one small all-gather of names and
   expert ranges), each need is served by the nearest holder (this rank first), and the
   pieces that live elsewhere travel point to point;
4. each rank hands its worker its tensors (``engine.load_adapter``), in memory.

When the engine's layout lines up with the learner's (the same pipeline split, a worker's
experts those its rank trains, as in the 671B config), nothing travels: every need is met
on its own rank. :class:`SyncStats` counts the bytes each rank held, sent and received.

Fused-expert tensors are peft's 3-D layout: ``lora_A`` ``[r E, in]`` with each expert's
``r`` rows together, ``lora_B`` ``[out, r E]`` with the expert index fastest
(:func:`expert_slice`, :func:`join_experts`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

_LAYER = re.compile(r"\.layers\.(\d+)\.")


def layer_of(name: str) -> int | None:
    """The decoder layer an adapter tensor belongs to (None: outside the layers)."""
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class Need:
    """What an engine worker serves of one adapter tensor: all of it (``experts`` None),
    or the rows of ``experts`` of a fused-expert tensor of ``total`` experts."""

    experts: range | None = None
    total: int = 0


@dataclass
class AdapterShard:
    """What a learner rank holds of one adapter tensor (peft name): the whole tensor
    (``experts`` None), or the rows of ``experts`` of a fused-expert tensor of ``total``."""

    name: str
    tensor: torch.Tensor
    experts: range | None = None
    total: int = 0


class AdapterSource(Protocol):
    """A learner, as the sync sees it."""

    def adapter_shards(self) -> list[AdapterShard]:
        """What this rank holds of the policy's adapter (every rank calls it together)."""
        ...


@dataclass
class SyncStats:
    """One sync on this rank, in bytes: ``held`` (the learner's shards plus what arrived,
    at once), ``served`` (what the worker was handed), ``sent`` and ``received``."""

    held: int = 0
    served: int = 0
    sent: int = 0
    received: int = 0


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


# ----------------------------------------------------------------------------- experts
def _kind(name: str) -> str:
    return "lora_A" if ".lora_A." in name else "lora_B"


def expert_slice(name: str, t: torch.Tensor, held: range, want: range) -> torch.Tensor:
    """The rows of experts ``want`` (a sub-range of ``held``) of a fused-expert tensor
    ``t`` that holds experts ``held``."""
    lo, hi = want.start - held.start, want.stop - held.start
    n = len(held)
    if _kind(name) == "lora_A":
        r = t.shape[0] // n
        return t[lo * r : hi * r].contiguous()
    view = t.reshape(t.shape[0], -1, n)
    return view[:, :, lo:hi].reshape(t.shape[0], -1).contiguous()


def join_experts(name: str, parts: Sequence[torch.Tensor], counts: Sequence[int]) -> torch.Tensor:
    """Consecutive experts' rows of a fused-expert tensor (``counts[i]`` experts in
    ``parts[i]``), as one tensor."""
    if _kind(name) == "lora_A":
        return torch.cat(list(parts), dim=0)
    rows = parts[0].shape[0]
    views = [p.reshape(rows, -1, c) for p, c in zip(parts, counts, strict=True)]
    return torch.cat(views, dim=2).reshape(rows, -1)


# ----------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class _Piece:
    """``dst`` needs ``name``'s experts ``experts`` (None: the whole tensor) from ``src``."""

    src: int
    dst: int
    name: str
    experts: tuple[int, int] | None
    total: int = 0


def plan_pieces(
    holdings: Sequence[Mapping[str, tuple[int, int, int] | None]],
    needs: Sequence[Mapping[str, tuple[int, int, int] | None]],
) -> list[_Piece]:
    """Which rank sends which piece to which, from every rank's holdings and needs.

    ``holdings[r][name]`` / ``needs[r][name]``: ``None`` for a whole tensor, else
    ``(first expert, end, total)``. A need is met by the rank itself when it can, else by
    the holders nearest to it (the smallest rank distance), expert range by expert range.

    Raises:
        RuntimeError: a need no rank can meet (the engine asks for what the learner does
            not have: a different adapter).
    """
    pieces: list[_Piece] = []
    for dst, wanted in enumerate(needs):
        for name, need in sorted(wanted.items()):
            holders = [(r, h[name]) for r, h in enumerate(holdings) if name in h]
            if not holders:
                raise RuntimeError(
                    f"no rank holds adapter tensor {name!r}, which rank {dst} serves"
                )
            if need is None and any(h is None for _, h in holders):
                src = min(
                    (r for r, h in holders if h is None), key=lambda r: (r != dst, abs(r - dst))
                )
                pieces.append(_Piece(src, dst, name, None))
                continue
            total = need[2] if need is not None else next(h[2] for _, h in holders if h is not None)
            lo, hi = (0, total) if need is None else need[:2]
            at = lo
            while at < hi:
                best = None
                for r, h in holders:
                    s, e = (0, total) if h is None else h[:2]
                    if s <= at < e:
                        key = (r != dst, abs(r - dst))
                        if best is None or key < best[0]:
                            best = (key, r, min(e, hi))
                if best is None:
                    raise RuntimeError(
                        f"no rank holds expert {at} of adapter tensor {name!r}, which rank "
                        f"{dst} serves"
                    )
                _, src, end = best
                pieces.append(_Piece(src, dst, name, (at, end), total))
                at = end
    return pieces


class AdapterSync:
    """Moves a learner's adapter into an engine, each worker its part (module docstring).

    Args:
        engine: the rollout engine (``adapter_needs``, ``load_adapter``).
        num_experts: the model's routed experts (0 for a dense model).
    """

    def __init__(self, engine: Any, *, num_experts: int = 0) -> None:
        self.engine = engine
        self.num_experts = num_experts

    def push(self, source: AdapterSource) -> SyncStats:
        """One sync (every rank calls it together); returns this rank's figures."""
        shards = {s.name: s for s in source.adapter_shards()}
        world, me = _place()
        shapes = {n: tuple(s.tensor.shape) for n, s in shards.items()}
        needs = self.engine.adapter_needs(
            _all_shapes(shapes) if world > 1 else shapes, self.num_experts
        )
        held = {n: _span(s.experts, s.total) for n, s in shards.items()}
        wanted = {n: _span(w.experts, w.total) for n, w in needs.items()}
        everyone = _all_gathered((held, wanted)) if world > 1 else [(held, wanted)]
        pieces = plan_pieces([h for h, _ in everyone], [w for _, w in everyone])
        got = _exchange(pieces, shards, me) if world > 1 else {}
        served = _assemble(needs, pieces, shards, got, me)
        experts = next((w.experts for w in needs.values() if w.experts is not None), None)
        self.engine.load_adapter(served, experts=experts)
        return SyncStats(
            held=sum(_nbytes(s.tensor) for s in shards.values()) + sum(map(_nbytes, got.values())),
            served=sum(map(_nbytes, served.values())),
            sent=sum(_nbytes(_cut(shards[p.name], p)) for p in pieces if p.src == me != p.dst),
            received=sum(map(_nbytes, got.values())),
        )


def _span(experts: range | None, total: int) -> tuple[int, int, int] | None:
    """A holding or a need as the plan reads it: None (whole) or (first, end, total)."""
    return None if experts is None else (experts.start, experts.stop, total)


def _place() -> tuple[int, int]:
    """``(world size, rank)`` of the job (``(1, 0)`` without a process group)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def _all_gathered(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order."""
    import torch.distributed as dist

    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def _assemble(
    needs: Mapping[str, Need],
    pieces: Sequence[_Piece],
    shards: Mapping[str, AdapterShard],
    got: Mapping[tuple[int, _Piece], torch.Tensor],
    me: int,
) -> dict[str, torch.Tensor]:
    """This rank's worker's tensors, each from its pieces (its own, and those received),
    experts joined in order."""
    served: dict[str, torch.Tensor] = {}
    for name in sorted(needs):
        mine = [p for p in pieces if p.dst == me and p.name == name]
        parts = [got[(p.src, p)] if p.src != me else _cut(shards[name], p) for p in mine]
        counts = [p.experts[1] - p.experts[0] for p in mine if p.experts is not None]
        served[name] = parts[0] if len(parts) == 1 else join_experts(name, parts, counts)
    return served


def _cut(shard: AdapterShard, piece: _Piece) -> torch.Tensor:
    """The part of ``shard`` that ``piece`` asks for."""
    if piece.experts is None:
        return shard.tensor
    held = shard.experts if shard.experts is not None else range(piece.total)
    want = range(*piece.experts)
    if want == held:
        return shard.tensor
    return expert_slice(shard.name, shard.tensor, held, want)


def _all_shapes(mine: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Every rank's adapter tensor names (with this rank's shape where it holds one)."""
    out: dict[str, tuple[int, ...]] = {}
    for part in _all_gathered(dict(mine)):
        for name, shape in part.items():
            out.setdefault(name, shape)
    return out


def _exchange(
    pieces: Sequence[_Piece],
    shards: Mapping[str, AdapterShard],
    me: int,
) -> dict[tuple[int, _Piece], torch.Tensor]:
    """Send this rank's pieces to other ranks and receive those it needs (point to point,
    all at once). Receive buffers take their shape from the sender's holding."""
    import torch.distributed as dist

    outgoing = {p: _cut(shards[p.name], p) for p in pieces if p.src == me and p.dst != me}
    meta = _all_gathered({p: (tuple(t.shape), str(t.dtype)) for p, t in outgoing.items()})
    ops, got = [], {}
    device = next(iter(shards.values())).tensor.device if shards else torch.device("cpu")
    for p in pieces:
        if p in outgoing:
            ops.append(dist.P2POp(dist.isend, outgoing[p].contiguous(), p.dst))
        elif p.dst == me and p.src != me:
            shape, dtype = meta[p.src][p]
            buf = torch.empty(
                shape, dtype=getattr(torch, dtype.removeprefix("torch.")), device=device
            )
            got[(p.src, p)] = buf
            ops.append(dist.P2POp(dist.irecv, buf, p.src))
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    return got
