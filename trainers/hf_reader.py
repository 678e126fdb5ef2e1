"""Reading a Hugging Face safetensors checkpoint slice by slice, DeepSeek's fp8 blocks included.

:class:`CheckpointReader` opens a checkpoint directory (one ``model.safetensors``, or
shards listed in ``model.safetensors.index.json``) and reads any box of any tensor
(``[(start, stop), ...]`` per dimension) with positioned reads (``os.preadv``) straight
into the destination's memory: only the bytes of the box leave the file, no file is
memory-mapped (a mapped file's touched pages count in the process's resident memory,
whole rows of them for a column slice), and :attr:`CheckpointReader.bytes_read` counts
what was read. Into a fake tensor (a dry run, :mod:`agentgym.trainers.dry_run`) nothing is
read and the bytes are counted as if they were: a header-only checkpoint then plans a
rank's reads.

DeepSeek's fp8 checkpoints (``config.json``: ``quantization_config: {quant_method: fp8,
fmt: e4m3, weight_block_size: [128, 128]}``) store a Linear weight ``W`` as
``float8_e4m3fn`` values ``q`` and, next to it, ``W_scale_inv``: one float32 factor per
128 x 128 block (``ceil(rows / 128) x ceil(cols / 128)``; the last block of a dimension
may be partial), with ``W = q * scale_inv`` blockwise. :meth:`CheckpointReader.read_weight`
always applies them: a box of a quantized weight is read with the scale blocks it
overlaps and returned dequantized to the asked dtype, or, with ``keep_fp8``, as the raw
``q`` box and its scale blocks (the box then has to start on block boundaries); an fp8
tensor is never returned as plain values without its scales.

Why not ``torch.distributed.checkpoint.quantized_hf_storage``: its reader (torch 2.13)
dequantizes always (a routed expert could not stay in fp8), reads the whole scale tensor
of each weight, goes through safetensors' memory map, and loads a DCP state dict in the
checkpoint's names, while the model holds fused expert stacks (:mod:`.loading` maps them).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentgym import ConfigError

#: safetensors dtype names -> torch dtypes
ST_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
#: the torch dtypes of float8 values (meaningless without their scales)
FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)
#: the suffix of a DeepSeek fp8 weight's block scales
SCALE_SUFFIX = "_scale_inv"

Box = Sequence[tuple[int, int]]


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lies: its file, dtype, shape and byte offset of its data."""

    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int


def fp8_block_size(config: dict[str, Any]) -> tuple[int, int] | None:
    """The ``(rows, cols)`` block of a DeepSeek-style fp8 checkpoint (its ``config.json``
    dict), or None for an unquantized one.

    Raises:
        ConfigError: another quantization method (this reader knows block fp8 only).
    """
    q = config.get("quantization_config")
    if not q:
        return None
    if q.get("quant_method") != "fp8" or q.get("fmt", "e4m3") != "e4m3":
        raise ConfigError(
            f"model.path's quantization_config {q} is not DeepSeek's block fp8 (quant_method "
            "fp8, fmt e4m3): agentgym reads unquantized or block-fp8 checkpoints; convert the "
            "checkpoint to bf16 first."
        )
    rows, cols = q.get("weight_block_size") or (128, 128)
    return int(rows), int(cols)


class CheckpointReader:
    """Boxes of the tensors of a local safetensors checkpoint (see the module docstring).

    Args:
        path: the checkpoint directory (``config.json`` and the safetensors files).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        config = json.loads((self.path / "config.json").read_text())
        self.block = fp8_block_size(config)
        self.tensors: dict[str, TensorInfo] = {}
        index = self.path / "model.safetensors.index.json"
        if index.is_file():
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        elif (self.path / "model.safetensors").is_file():
            files = ["model.safetensors"]
        else:
            raise ConfigError(
                f"{self.path} has neither model.safetensors nor model.safetensors.index.json: "
                "point model.path at a checkpoint saved with save_pretrained (safetensors)."
            )
        for name in files:
            self._read_header(self.path / name)
        #: bytes read from the files so far (headers excluded)
        self.bytes_read = 0

    #: bytes every reader of this process has read (what a rank read, at the reader)
    process_bytes_read = 0

    def _read_header(self, file: Path) -> None:
        with open(file, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            if meta["dtype"] not in ST_DTYPES:
                raise ConfigError(f"{file}: tensor {name} has unsupported dtype {meta['dtype']}.")
            start, _ = meta["data_offsets"]
            self.tensors[name] = TensorInfo(
                file, ST_DTYPES[meta["dtype"]], tuple(meta["shape"]), 8 + size + start
            )

    # ------------------------------------------------------------------ raw boxes
    def info(self, name: str) -> TensorInfo:
        """Where ``name`` is; a clear error naming the checkpoint when it is absent."""
        if name not in self.tensors:
            raise ConfigError(
                f"the checkpoint at {self.path} has no tensor {name!r}: it was written for "
                "another architecture or model size than model.path's config.json says."
            )
        return self.tensors[name]

    def read(
        self, name: str, box: Box | None = None, *, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The raw values of ``box`` of tensor ``name`` (the whole tensor for None), on the
        host, in the file's dtype; only those bytes are read. ``out``: a contiguous host
        tensor of that shape and dtype to read into (no other copy is made)."""
        info = self.info(name)
        shape = info.shape
        box = [(0, n) for n in shape] if box is None else [tuple(b) for b in box]
        if len(box) != len(shape) or any(
            not 0 <= a <= b <= n for (a, b), n in zip(box, shape, strict=True)
        ):
            raise ConfigError(f"box {box} does not fit {name} of shape {list(shape)}.")
        size = [b - a for a, b in box]
        if out is None:
            out = torch.empty(size, dtype=info.dtype)
        elif list(out.shape) != size or out.dtype != info.dtype or not out.is_contiguous():
            raise ConfigError(f"cannot read {name}{box} into a {out.dtype} {list(out.shape)}.")
        if out.numel() == 0:
            return out
        if _is_fake(out):  # a dry run: the bytes are counted, nothing is read
            n = out.numel() * out.element_size()
            self.bytes_read += n
            CheckpointReader.process_bytes_read += n
            return out
        item = out.element_size()
        strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
        # the trailing dimensions the box covers whole make one contiguous run per index
        k = len(shape)
        while k > 0 and box[k - 1] == (0, shape[k - 1]):
            k -= 1
        host = out.view(torch.uint8)
        if host.device.type != "cpu":  # .cpu() below must be the tensor itself, not a copy
            raise ValueError(f"the reader fills host tensors; got one on {host.device}")
        buf = memoryview(host.cpu().numpy().reshape(-1))
        if k == 0:
            self._pread(info.file, buf, info.offset)
            return out
        run = (box[k - 1][1] - box[k - 1][0]) * strides[k - 1] * item
        outer = [range(a, b) for a, b in box[: k - 1]]
        pos = 0
        for idx in _product(outer):
            first = (
                sum(i * s for i, s in zip(idx, strides, strict=False))
                + box[k - 1][0] * strides[k - 1]
            )
            self._pread(info.file, buf[pos : pos + run], info.offset + first * item)
            pos += run
        return out

    def _pread(self, file: Path, buf: memoryview, offset: int) -> None:
        fd = self._fd(file)
        done = 0
        while done < len(buf):
            n = os.preadv(fd, [buf[done:]], offset + done)
            if n <= 0:
                raise ConfigError(f"{file} ends early: the checkpoint file is truncated.")
            done += n
        self.bytes_read += done
        CheckpointReader.process_bytes_read += done

    def _fd(self, file: Path) -> int:
        fds = self.__dict__.setdefault("_fds", {})
        if file not in fds:
            fds[file] = os.open(file, os.O_RDONLY)
        return fds[file]

    def close(self) -> None:
        """Close the files (the reader can be used again: they reopen)."""
        for fd in self.__dict__.pop("_fds", {}).values():
            os.close(fd)

    # ------------------------------------------------------------------ weights
    def is_block_fp8(self, name: str) -> bool:
        """``name`` is stored as fp8 values with block scales next to it."""
        return self.info(name).dtype in FLOAT8 and f"{name}{SCALE_SUFFIX}" in self.tensors

    def read_weight(
        self, name: str, box: Box | None, dtype: torch.dtype, *, keep_fp8: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """``box`` of weight ``name`` as ``dtype`` values, its block scales applied when it
        is stored in block fp8; with ``keep_fp8`` (a block-fp8 weight) the raw fp8 box and
        the float32 scales of its blocks instead.

        Raises:
            ConfigError: an fp8 tensor without scales; ``keep_fp8`` on a box that does
                not start on block boundaries.
        """
        info = self.info(name)
        if info.dtype not in FLOAT8:
            return self.read(name, box).to(dtype)
        if not self.is_block_fp8(name) or self.block is None or len(info.shape) != 2:
            raise ConfigError(
                f"{name} is stored in {info.dtype} without {name}{SCALE_SUFFIX} block scales "
                "(or config.json lacks quantization_config.weight_block_size): its values "
                "cannot be used without their scales; use the checkpoint as published."
            )
        box = [(0, n) for n in info.shape] if box is None else [tuple(b) for b in box]
        (r0, r1), (c0, c1) = box
        br, bc = self.block
        sbox = [(r0 // br, -(-r1 // br)), (c0 // bc, -(-c1 // bc))]
        q = self.read(name, box)
        scale = self.read(f"{name}{SCALE_SUFFIX}", sbox).float()
        if keep_fp8:
            if r0 % br or c0 % bc:
                raise ConfigError(
                    f"{name}: a slice from row {r0}, column {c0} cuts fp8 blocks of "
                    f"{br}x{bc}; keep this weight in the base dtype (model.quantize=none)."
                )
            return q, scale
        full = scale.repeat_interleave(br, 0).repeat_interleave(bc, 1)
        full = full[r0 - sbox[0][0] * br :, c0 - sbox[1][0] * bc :][: r1 - r0, : c1 - c0]
        return (q.float() * full).to(dtype)


def _is_fake(t: torch.Tensor) -> bool:
    """Whether ``t`` is a fake tensor (``FakeTensorMode``: a dry run, no memory)."""
    from torch._subclasses.fake_tensor import is_fake

    return bool(is_fake(t))


def _product(ranges: list[range]) -> Any:
    """Every index tuple of ``ranges`` in row-major order (``((),)`` for none)."""
    if not ranges:
        yield ()
        return
    for i in ranges[0]:
        for rest in _product(ranges[1:]):
            yield (i, *rest)


def dequantize_blocks(q: torch.Tensor, scale: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """Float32 values of a block-fp8 weight ``q`` (``[..., rows, cols]``) and its scales
    (``[..., ceil(rows / br), ceil(cols / bc)]``)."""
    br, bc = block
    rows, cols = q.shape[-2:]
    full = scale.float().repeat_interleave(br, -2).repeat_interleave(bc, -1)
    return q.float() * full[..., :rows, :cols]
