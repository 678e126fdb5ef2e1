"""The adapter's first values, drawn per rank: what one process draws, never drawn whole.

peft gives a new LoRA adapter its values from the global CPU generator, module after
module: ``kaiming_uniform_`` on each ``lora_A`` (twice: the Linear's own init, then peft's
reset) and on each ``lora_B`` (then zeroed). One process draws every value; DeepSeek-V3's
rank-16 adapter is 4.93e9 of them (19.7 GB in float32) while a rank of the 671B mesh keeps
about 1/45 of it. Drawing it whole on every rank's host, to keep a slice, is what this
module replaces:

1. :func:`record_draws` runs peft on a meta-built model with its adapter on the meta
   device too (nothing is allocated, nothing drawn) under a dispatch mode that notes every
   random fill in order: its tensor, size and bounds, and every ``zero_``. CPU
   ``uniform_`` takes one 32-bit number of the generator per element, in element order
   (float32, bfloat16, float16), so each draw's place in the generator's stream is the sum
   of the sizes before it;
2. :meth:`AdapterDraws.fill` gives the tensors a rank holds their values: the generator
   is replayed from the seed, the draws the rank does not keep skipped (drawn into one
   reused scratch chunk), those it keeps drawn chunk by chunk with only the rows of its
   box copied out; a zeroed tensor needs no draw. The values then pass through the base
   layer's dtype, as peft's move of the adapter to its base layer's dtype does (bf16
   rounding with a bf16 base), and take the tensor's own dtype.

The result equals what :func:`~.models.apply_lora` draws on a loaded base with the same
seed (tested on the tiny models, float32 and bf16 bases). A rank holds its share and one
scratch chunk (:data:`CHUNK` values); skipping costs time, not memory: every number up to
the last draw the rank keeps passes through the generator (DeepSeek-V3's whole adapter
init is about 7.4e9 numbers).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from agentgym import ConfigError

#: values drawn at a time when skipping or filling (16 MiB of float32)
CHUNK = 1 << 22
#: the attribute of a meta-built model holding its :class:`AdapterDraws`
DRAWS_ATTR = "agentgym_adapter_draws"
#: dtypes whose CPU ``uniform_`` takes one 32-bit generator number per element
_ONE_WORD = (torch.float32, torch.bfloat16, torch.float16)

Box = Sequence[tuple[int, int]]


@dataclass(frozen=True)
class Draw:
    """One ``uniform_`` of the generator: ``numel`` values in ``[low, high)`` of ``dtype``
    into a tensor of ``shape``, starting at generator number ``start``."""

    key: int
    shape: tuple[int, ...]
    dtype: torch.dtype
    low: float
    high: float
    start: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class AdapterDraws:
    """Every random fill of an adapter's initialisation, in order, and what each adapter
    tensor ends as (module docstring).

    Attributes:
        seed: the generator's seed.
        draws: every ``uniform_``, in the generator's order.
        final: parameter name -> the index in ``draws`` of its last fill, or ``None``
            when it ends zeroed.
        via: parameter name -> the dtype its values passed through (its base layer's).
        shapes: parameter name -> (shape, dtype) of the whole tensor.
    """

    seed: int
    draws: list[Draw] = field(default_factory=list)
    final: dict[str, int | None] = field(default_factory=dict)
    via: dict[str, torch.dtype] = field(default_factory=dict)
    shapes: dict[str, tuple[tuple[int, ...], torch.dtype]] = field(default_factory=dict)

    @property
    def numbers(self) -> int:
        """Generator numbers the whole initialisation takes."""
        return sum(d.numel for d in self.draws)

    def fill(self, wants: Sequence[tuple[str, torch.Tensor, Box]]) -> None:
        """Give each ``(name, target, box)`` the values of ``box`` (``(start, stop)`` per
        dimension of the whole tensor) of parameter ``name``; ``target`` has the box's
        shape. Every target must be one of :attr:`final`'s names."""
        by_draw: dict[int, list[tuple[torch.Tensor, Box, torch.dtype]]] = {}
        for name, target, box in wants:
            if name not in self.final:
                raise KeyError(f"{name} is not an adapter tensor of this initialisation")
            index = self.final[name]
            with torch.no_grad():
                if index is None:
                    target.zero_()
                else:
                    by_draw.setdefault(index, []).append((target, box, self.via[name]))
        if not by_draw:
            return
        gen = torch.Generator().manual_seed(self.seed)
        last = max(by_draw)
        for i, draw in enumerate(self.draws[: last + 1]):
            if i in by_draw:
                _draw_boxes(gen, draw, by_draw[i])
            else:
                _skip(gen, draw.numel, draw.dtype)


def _skip(gen: torch.Generator, numel: int, dtype: torch.dtype) -> None:
    """Advance ``gen`` by ``numel`` draws of ``dtype`` (through one scratch chunk)."""
    scratch = torch.empty(min(numel, CHUNK), dtype=dtype)
    left = numel
    while left > 0:
        n = min(left, CHUNK)
        scratch[:n].uniform_(generator=gen)
        left -= n


def _draw_boxes(
    gen: torch.Generator, draw: Draw, boxes: list[tuple[torch.Tensor, Box, torch.dtype]]
) -> None:
    """Draw ``draw`` row block by row block, copying each box's rows out of each block."""
    shape = draw.shape if len(draw.shape) >= 2 else (1, *draw.shape)
    rows, cols = math.prod(shape[:-1]), shape[-1]
    per = max(1, CHUNK // max(cols, 1))
    flat = [
        (t.reshape(-1, t.shape[-1]) if t.dim() >= 2 else t.reshape(1, -1), b) for t, b, _ in boxes
    ]
    for r0 in range(0, rows, per):
        r1 = min(rows, r0 + per)
        block = torch.empty(r1 - r0, cols, dtype=draw.dtype).uniform_(
            draw.low, draw.high, generator=gen
        )
        for (target, box), (_, _, via) in zip(flat, boxes, strict=True):
            (b0, b1), (c0, c1) = _rows_cols(box, len(draw.shape))
            a, b = max(r0, b0), min(r1, b1)
            if a >= b:
                continue
            part = block[a - r0 : b - r0, c0:c1].to(via).to(target.dtype)
            with torch.no_grad():
                target[a - b0 : b - b0].copy_(part)


def _rows_cols(box: Box, dims: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """A 1-D or 2-D box as (rows, columns) of the tensor seen as a matrix."""
    if dims == 1:
        return (0, 1), tuple(box[0])  # type: ignore[return-value]
    if dims != 2:
        raise ConfigError("adapter tensors of more than two dimensions are not supported here")
    return tuple(box[0]), tuple(box[1])  # type: ignore[return-value]


# ----------------------------------------------------------------------------- recording
#: the random fills CPU tensors can take; only ``uniform_`` is replayed
_RANDOM = {
    "uniform_", "normal_", "random_", "bernoulli_", "exponential_", "geometric_",
    "log_normal_", "cauchy_", "rand", "randn", "randint", "randperm", "multinomial",
    "rand_like", "randn_like", "randint_like", "normal", "bernoulli", "poisson",
}  # fmt: skip


class _Recorder(TorchDispatchMode):
    """Notes the random fills and ``zero_`` calls of the code it runs (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, torch.Tensor, tuple[Any, ...]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func._schema.name.split("::")[-1]
        if name in _RANDOM:
            if name != "uniform_" or kwargs.get("generator") is not None:
                raise ConfigError(
                    f"the adapter's initialisation draws with aten.{name}: the per-rank draw "
                    "replays peft's default init (kaiming-uniform lora_A, zero lora_B) only; "
                    "use lora.init defaults, or one process."
                )
            self.ops.append(("uniform_", args[0], tuple(args[1:3])))
        elif name == "zero_":
            self.ops.append(("zero_", args[0], ()))
        return func(*args, **kwargs)


def record_draws(model: nn.Module, make: Any, *, seed: int) -> tuple[Any, AdapterDraws]:
    """Run ``make(model)`` (peft's injection: :func:`~.models.apply_lora`) with new
    parameters on the meta device, noting its random fills; returns its result and the
    :class:`AdapterDraws` of the adapter it made (every ``lora_`` parameter)."""
    recorder = _Recorder()
    with torch.device("meta"), recorder:
        out = make(model)
    draws = AdapterDraws(seed=seed)
    last: dict[int, int | None] = {}
    start = 0
    keep: list[torch.Tensor] = []  # the recorded tensors stay alive: ids are not reused
    for kind, t, bounds in recorder.ops:
        keep.append(t)
        if kind == "zero_":
            last[id(t)] = None
            continue
        if t.dtype not in _ONE_WORD:
            raise ConfigError(f"the adapter's initialisation draws {t.dtype} values: not replayed.")
        low, high = (float(b) for b in bounds)
        draws.draws.append(Draw(id(t), tuple(t.shape), t.dtype, low, high, start))
        last[id(t)] = len(draws.draws) - 1
        start += t.numel()
    for name, p, base_dtype in adapter_parameters(out):
        if id(p) not in last:
            raise ConfigError(f"{name}: peft gave it no recorded initial values.")
        draws.final[name] = last[id(p)]
        draws.via[name] = base_dtype
        draws.shapes[name] = (tuple(p.shape), p.dtype)
    return out, draws


def adapter_parameters(peft_model: nn.Module) -> Iterator[tuple[str, nn.Parameter, torch.dtype]]:
    """Each ``lora_`` parameter with the dtype of the base weight its layer adapts (what
    peft casts a new adapter to before ``autocast_adapter_dtype`` casts it back)."""
    owners = dict(peft_model.named_modules())
    for name, p in peft_model.named_parameters():
        if "lora_" not in name:
            continue
        layer = owners[name.split(".lora_", 1)[0]]
        yield name, p, _base_dtype(layer, p.dtype)


def _base_dtype(layer: nn.Module, default: torch.dtype) -> torch.dtype:
    """The floating dtype of ``layer``'s adapted weight (a peft LoraLayer)."""
    base = layer.get_base_layer() if hasattr(layer, "get_base_layer") else None
    pname = getattr(layer, "parameter_name", None)
    weight = getattr(base, pname, None) if pname else getattr(base, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dtype.is_floating_point:
        return weight.dtype
    return default
