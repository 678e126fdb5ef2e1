"""Loading at scale: the model built on the meta device, each rank reading only its share.

``model.path`` under a device mesh (``distributed: {dp_shard, tp, ep, pp}``), and any
DeepSeek block-fp8 checkpoint, load this way (torchtitan's order: build on meta,
parallelize, allocate, load each rank's part):

1. :func:`meta_model_and_tokenizer`: the architecture from ``config.json`` on the meta
   device (no memory), its floating parameters given ``model.dtype``; the non-persistent
   buffers (rotary frequencies) recomputed on the host by the model's own init rule;
2. :func:`~.models.apply_lora_on_meta`: peft's LoRA on the meta device too, with a record
   of how peft draws its values (:mod:`.lora_draws`);
3. the mesh learner cuts its stage, its experts and its tensor-parallel slices and
   shards with FSDP2, all on meta, then :func:`load_rank_share` allocates what the rank
   keeps (``to_empty``) and reads it from the checkpoint (:mod:`.hf_reader`): each
   DTensor's local box (``compute_local_shape_and_global_offset``), each expert share's
   experts, straight in the target dtype; the adapter's share gets the values one process
   draws with the same seed (replayed from the seed, rows outside the share skipped).
   Nothing else is read or drawn; no rank ever holds a whole copy of either.

The state-dict adapter (checkpoint names -> the model's): transformers 5 holds a MoE
layer's routed experts fused (``experts.gate_up_proj: [E, 2I, H]``,
``experts.down_proj: [E, H, I]``) while the published checkpoints, and
``save_pretrained``, keep one ``experts.{e}.{gate,up,down}_proj.weight`` per expert:
expert ``e``'s rows of the stack are read from its own tensors (a fused checkpoint is
read as it is). Block-fp8 weights are always read with their scales: dequantized to
``model.dtype``, or, for the routed experts with ``model.quantize: fp8``, kept in fp8 as
a torchao ``Float8Tensor`` holding the checkpoint's own values and 128x128 block scales
(:func:`block_fp8_tensor`); dense weights are dequantized.

One process reads the same way (:func:`load_whole_model`) when the checkpoint is block
fp8; an unquantized one still loads through ``from_pretrained`` (:mod:`.models`).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentgym import ConfigError
from agentgym.trainers.hf_reader import SCALE_SUFFIX, CheckpointReader, fp8_block_size

#: the attribute of a (peft) model that says where its weights are still to be read from
SOURCE_ATTR = "agentgym_checkpoint"
#: the fused expert stacks and the per-expert checkpoint tensors they are made of
FUSED_EXPERTS = {"gate_up_proj": ("gate_proj", "up_proj"), "down_proj": ("down_proj",)}


@dataclass(frozen=True)
class CheckpointSource:
    """Where a meta-built model's weights are read from, and how.

    Attributes:
        path: the checkpoint directory.
        dtype: the base weights' dtype (``model.dtype``).
        device: where the rank computes.
        keep_fp8_experts: keep the routed experts in the checkpoint's block fp8
            (``model.quantize: fp8`` on a block-fp8 checkpoint).
        fake: a dry run's ``FakeTensorMode`` (:mod:`.dry_run`): the rank's tensors are
            allocated as fake tensors (shapes, no memory) and nothing is read; the
            checkpoint's headers alone are needed.
    """

    path: str
    dtype: torch.dtype
    device: torch.device
    keep_fp8_experts: bool = False
    fake: Any = None

    def allocating(self) -> Any:
        """The context tensors are allocated in: the dry run's fake mode, or none."""
        return self.fake if self.fake is not None else contextlib.nullcontext()

    @property
    def on_host(self) -> bool:
        """The rank's tensors are host memory (CPU training), read straight into; in a
        dry run they stand for a GPU's, reached through a host buffer as there."""
        return self.device.type == "cpu" and self.fake is None

    def to_device(self, t: torch.Tensor) -> torch.Tensor:
        """A host buffer moved to the rank's device (a copy in a dry run, as on a GPU)."""
        return t.to(self.device, copy=self.fake is not None)


def checkpoint_config(path: str | Path) -> dict[str, Any]:
    """``config.json`` of a checkpoint directory (a dict)."""
    return json.loads((Path(path) / "config.json").read_text())


def is_block_fp8(path: str | Path) -> bool:
    """The checkpoint at ``path`` is in DeepSeek's block fp8 format (another quantization
    method is not: ``from_pretrained`` keeps loading those)."""
    try:
        return fp8_block_size(checkpoint_config(path)) is not None
    except ConfigError:
        return False


def source_of(model: nn.Module) -> CheckpointSource | None:
    """The :class:`CheckpointSource` a meta-built model still has to read, or None."""
    return getattr(model, SOURCE_ATTR, None)


# ----------------------------------------------------------------------------- building
def meta_model_and_tokenizer(path: str | Path) -> tuple[nn.Module, Any]:
    """The causal LM of ``path``'s ``config.json`` with every parameter and persistent
    buffer on the meta device (float32, as :func:`~agentgym.generation.load_model` reads it before
    ``model.dtype`` is applied), its non-persistent buffers computed on the host, and
    the tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(str(path))
    if getattr(config, "quantization_config", None) is not None:
        del config.quantization_config  # plain modules: the reader applies the scales
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    for module in model.modules():
        names = [
            n
            for n in module._non_persistent_buffers_set
            if module._buffers.get(n) is not None and module._buffers[n].is_meta
        ]
        if names:
            for n in names:
                module._buffers[n] = torch.empty_like(module._buffers[n], device="cpu")
            model._init_weights(module)  # the model's own rule (rotary frequencies)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer


# ----------------------------------------------------------------------------- names
def checkpoint_name(name: str) -> str:
    """The checkpoint's name of a model tensor: peft's prefixes and wrappers dropped."""
    for prefix in ("base_model.model.",):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return name.replace(".base_layer", "")


def _expert_stack(name: str) -> tuple[str, str] | None:
    """``(experts module path, stack)`` when ``name`` is a fused expert stack."""
    head, _, leaf = name.rpartition(".")
    if leaf in FUSED_EXPERTS and head.rsplit(".", 1)[-1].startswith("experts"):
        return head, leaf
    return None


# ----------------------------------------------------------------------------- reading
def _local_box(t: torch.Tensor) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """The local tensor of ``t`` (itself, or a DTensor's shard) and its box in ``t``."""
    if hasattr(t, "device_mesh") and hasattr(t, "placements"):
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        with unset_fake_temporarily():  # arithmetic on the mesh (a dry run's fake mode)
            shape, offset = compute_local_shape_and_global_offset(
                t.shape, t.device_mesh, t.placements
            )
        return t.to_local(), [(o, o + s) for o, s in zip(offset, shape, strict=True)]
    return t, [(0, n) for n in t.shape]


class ShareLoader:
    """Fills a model's allocated tensors from a checkpoint, box by box.

    Args:
        reader: the checkpoint.
        source: dtype, device, and whether the routed experts stay in fp8.
        expert_offsets: model parameter name -> the global index of its first expert
            (the parameters holding a share of the routed experts; 0 when unsplit).
    """

    def __init__(
        self, reader: CheckpointReader, source: CheckpointSource, expert_offsets: dict[str, int]
    ) -> None:
        self.reader = reader
        self.source = source
        self.expert_offsets = expert_offsets

    def tensor(self, name: str, target: torch.Tensor, box: list[tuple[int, int]]) -> None:
        """Fill ``target`` (in place) with ``box`` of the checkpoint's tensor for model
        name ``name``."""
        if target.numel() == 0:
            return
        key = checkpoint_name(name)
        stack = _expert_stack(key)
        if stack is None or key in self.reader.tensors:
            self._fill(key, box, target)
            return
        module, leaf = stack
        offset = self.expert_offsets.get(name, 0)
        (r0, r1), cols = box[1], box[2]
        for j, e in enumerate(range(offset + box[0][0], offset + box[0][1])):
            start = 0  # the stack's rows: gate_proj's, then up_proj's
            for part in FUSED_EXPERTS[leaf]:
                piece = f"{module}.{e}.{part}.weight"
                rows = self.reader.info(piece).shape[0]
                a, b = max(r0, start), min(r1, start + rows)
                if a < b:
                    self._fill(piece, [(a - start, b - start), cols], target[j, a - r0 : b - r0])
                start += rows

    def _fill(self, key: str, box: list[tuple[int, int]], target: torch.Tensor) -> None:
        """Read a box into ``target``: straight into its memory when it is a contiguous
        host tensor of the file's dtype, else through one host copy of the box."""
        direct = (
            self.source.on_host
            and target.device.type == "cpu"
            and target.is_contiguous()
            and self.reader.info(key).dtype == target.dtype
        )
        if direct:
            self.reader.read(key, box, out=target)
        else:
            target.copy_(self.reader.read_weight(key, box, target.dtype))

    def fp8_experts(self, key: str, offset: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``count`` experts of a fused stack from ``offset`` as fp8 values and their block
        scales (``[count, rows, cols]`` and ``[count, row blocks, col blocks]``), each
        expert's tensors read straight into their place in the stacks."""
        stack = _expert_stack(key)
        if stack is None or self.reader.block is None:
            raise ConfigError(f"{key} is not a routed-expert stack of a block-fp8 checkpoint.")
        module, leaf = stack
        block = self.reader.block
        names = [
            [f"{module}.{e}.{p}.weight" for p in FUSED_EXPERTS[leaf]]
            for e in range(offset, offset + count)
        ]
        shapes = [self.reader.info(n).shape for n in names[0]]
        if not all(self.reader.is_block_fp8(n) for row in names for n in row):
            raise ConfigError(f"{names[0][0]} is not stored in block fp8: model.quantize=none.")
        if any(rows % block[0] for rows, _ in shapes[:-1]):
            raise ConfigError(
                f"{key}: fusing gate and up projections of {shapes[0][0]} rows breaks the "
                f"{block[0]}-row fp8 blocks; model.quantize=none dequantizes them (or use a "
                "model whose moe_intermediate_size is a multiple of the block)."
            )
        rows, cols = sum(r for r, _ in shapes), shapes[0][1]
        q = torch.empty(count, rows, cols, dtype=torch.float8_e4m3fn)
        scale = torch.empty(count, sum(-(-r // block[0]) for r, _ in shapes), -(-cols // block[1]))
        for j, row in enumerate(names):
            at = at_s = 0
            for n, (r, _) in zip(row, shapes, strict=True):
                self.reader.read(n, None, out=q[j, at : at + r])
                rs = -(-r // block[0])
                self.reader.read(f"{n}{SCALE_SUFFIX}", None, out=scale[j, at_s : at_s + rs])
                at, at_s = at + r, at_s + rs
        return q, scale


def quantized_expert_params(model: nn.Module, source: CheckpointSource | None) -> set[nn.Parameter]:
    """The routed experts' base stacks that :func:`load_rank_share` will keep in fp8 (so
    that FSDP2 leaves them whole, as it does any quantized weight)."""
    if source is None or not source.keep_fp8_experts:
        return set()
    return {
        p
        for n, p in model.named_parameters()
        if _expert_stack(checkpoint_name(n)) is not None and not p.requires_grad
    }


def _allocate(model: nn.Module, device: torch.device, skip: set[str] = frozenset()) -> set[str]:
    """Storage on ``device`` for every meta tensor of ``model`` (``to_empty``, so FSDP2
    re-pads its shards) but the parameters named in ``skip`` (left on meta: the routed
    experts kept in fp8, made from the checkpoint's fp8 values, never in the base dtype),
    the tensors that already had values (rotary frequencies) keeping them; returns the
    names of those."""
    held = _set_aside(model, skip)
    try:
        return _allocate_all(model, device)
    finally:
        for module, leaf, p in held:
            module._parameters[leaf] = p


def _set_aside(model: nn.Module, names: set[str]) -> list[tuple[nn.Module, str, nn.Parameter]]:
    """Take the parameters ``names`` out of their modules (a ``None`` slot) for a moment."""
    owners = dict(model.named_modules())
    out = []
    for name in names:
        module_name, _, leaf = name.rpartition(".")
        module = owners[module_name]
        out.append((module, leaf, module._parameters[leaf]))
        module._parameters[leaf] = None
    return out


def _allocate_all(model: nn.Module, device: torch.device) -> set[str]:
    kept = {}
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        local, _ = _local_box(t.data if isinstance(t, nn.Parameter) else t)
        if not local.is_meta:
            kept[name] = local.detach().to(device, copy=True)
    owners: dict[int, list[tuple[nn.Module, str]]] = {}  # tied weights: one tensor, 2 names
    for module in model.modules():
        for leaf, t in module._parameters.items():
            if t is not None:
                owners.setdefault(id(t), []).append((module, leaf))
    model.to_empty(device=device)
    for tied in (o for o in owners.values() if len(o) > 1):  # to_empty makes one per owner
        first = tied[0][0]._parameters[tied[0][1]]
        for module, leaf in tied[1:]:
            module._parameters[leaf] = first
    with torch.no_grad():
        for name, t in [*model.named_parameters(), *model.named_buffers()]:
            if name in kept:
                _local_box(t.data if isinstance(t, nn.Parameter) else t)[0].copy_(kept[name])
    return set(kept)


def load_rank_share(
    model: nn.Module,
    source: CheckpointSource,
    expert_offsets: dict[str, int],
    *,
    expert_adapters: dict[str, tuple[str, int, int]] | None = None,
    reader: CheckpointReader | None = None,
) -> CheckpointReader:
    """Allocate this rank's tensors of the split, meta-built ``model`` and read them; a
    meta adapter (:func:`~.models.apply_lora_on_meta`) gets its share's first values
    (:class:`~.lora_draws.AdapterDraws`).

    Args:
        model: the training model, parallelized (DTensors, expert shares, its stage).
        source: the checkpoint and how to read it.
        expert_offsets: name -> global index of the first expert a stack parameter holds.
        expert_adapters: name -> (``lora_A`` / ``lora_B``, first expert, experts in all)
            of the adapter tensors holding a share of the experts.
        reader: reuse this reader (its byte count goes on).

    Returns:
        The reader (``bytes_read``: what this rank read).
    """
    with source.allocating():
        return _load_rank_share(model, source, expert_offsets, expert_adapters, reader)


def _load_rank_share(
    model: nn.Module,
    source: CheckpointSource,
    expert_offsets: dict[str, int],
    expert_adapters: dict[str, tuple[str, int, int]] | None,
    reader: CheckpointReader | None,
) -> CheckpointReader:
    from agentgym.trainers.lora_draws import DRAWS_ATTR

    reader = reader or CheckpointReader(source.path)
    kept_fp8 = {id(p) for p in quantized_expert_params(model, source)}
    fp8 = {n for n, p in model.named_parameters() if id(p) in kept_fp8}  # by name: to_empty
    have = _allocate(model, source.device, skip=fp8)
    loader = ShareLoader(reader, source, expert_offsets)
    owners = {n: m for n, m in model.named_modules()}
    draws = getattr(model, DRAWS_ATTR, None)
    drawn: list[tuple[str, torch.Tensor, list[tuple[int, int]]]] = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in have:
                continue  # the adapter (and a critic's head): made with their values
            if draws is not None and name in draws.final:
                local, box = _local_box(p.data)
                drawn.append((name, local, _adapter_box(name, box, draws, expert_adapters)))
                continue
            if name in fp8:
                module_name, _, leaf = name.rpartition(".")
                if hasattr(p, "device_mesh"):
                    raise ConfigError(
                        f"{name}: an fp8 expert stack cannot be sharded by FSDP2 or tp."
                    )
                q, s = loader.fp8_experts(
                    checkpoint_name(name), expert_offsets.get(name, 0), p.shape[0]
                )
                q, s = source.to_device(q), source.to_device(s)  # the host buffers go
                w = block_fp8_tensor(q, s, reader.block or (128, 128), source.dtype)
                setattr(owners[module_name], leaf, nn.Parameter(w, False))
                continue
            local, box = _local_box(p.data)
            loader.tensor(name, local, box)
        for module_name, module in model.named_modules():
            for leaf, b in module._buffers.items():
                if b is None or leaf in module._non_persistent_buffers_set:
                    continue
                full = f"{module_name}.{leaf}" if module_name else leaf
                if full in have:
                    continue
                loader.tensor(full, b, [(0, n) for n in b.shape])
    if drawn:
        draws.fill(drawn)
    reader.close()
    return reader


def _adapter_box(
    name: str,
    box: list[tuple[int, int]],
    draws: Any,
    expert_adapters: dict[str, tuple[str, int, int]] | None,
) -> list[tuple[int, int]]:
    """A local adapter tensor's box in the whole tensor peft drew: an expert share's
    ``lora_A`` rows start at its first expert's (``r`` rows per expert)."""
    kind, first, total = (expert_adapters or {}).get(name, ("", 0, 0))
    if not kind:
        return box
    whole = draws.shapes[name][0]
    if kind == "lora_B":  # experts are its fastest column index: a share is no box
        if draws.final[name] is not None:
            raise ConfigError(f"{name}: an expert share of a drawn lora_B is not one box.")
        return box
    rows = whole[0] // total * first
    return [(box[0][0] + rows, box[0][1] + rows), *box[1:]]


def release_meta(model: nn.Module, source: CheckpointSource) -> None:
    """Make a meta-built generation model usable by :class:`~.parallel.MeshStrategy`:
    its meta parameters become empty host tensors (filled at each rollout by gathering)
    and its persistent buffers (small: router biases) are read whole."""
    with source.allocating():
        _release_meta(model, source)


def _release_meta(model: nn.Module, source: CheckpointSource) -> None:
    reader = CheckpointReader(source.path)
    loader = ShareLoader(reader, source, {})
    for module_name, module in model.named_modules():
        for leaf, p in list(module._parameters.items()):
            if p is not None and p.is_meta:
                empty = torch.empty(0, dtype=p.dtype, device=source.device)
                module._parameters[leaf] = nn.Parameter(empty, requires_grad=p.requires_grad)
        for leaf, b in list(module._buffers.items()):
            if b is not None and b.is_meta:
                full = f"{module_name}.{leaf}" if module_name else leaf
                value = torch.empty(b.shape, dtype=b.dtype)
                loader.tensor(full, value, [(0, n) for n in b.shape])
                module._buffers[leaf] = value.to(source.device)
    reader.close()


def load_whole_model(model: nn.Module, source: CheckpointSource) -> nn.Module:
    """One process: every tensor of a meta-built model (LoRA applied or not) read from
    the checkpoint, block-fp8 weights with their scales (the experts kept in fp8 with
    ``source.keep_fp8_experts``)."""
    load_rank_share(model, source, {})
    return model


def load_dequantized(path: str | Path) -> tuple[nn.Module, Any]:
    """A block-fp8 checkpoint as :func:`~agentgym.generation.load_model` gives any other: the whole
    model in float32 on the host (every weight times its block scales), and the
    tokenizer; ``place_model`` then casts and moves it like any other."""
    model, tokenizer = meta_model_and_tokenizer(path)
    load_whole_model(model, CheckpointSource(str(path), torch.float32, torch.device("cpu")))
    return model, tokenizer


def block_fp8_tensor(
    qdata: torch.Tensor, scale: torch.Tensor, block: tuple[int, int], dtype: torch.dtype
) -> torch.Tensor:
    """A torchao ``Float8Tensor`` holding a DeepSeek block-fp8 weight as the checkpoint has
    it: ``qdata`` (float8_e4m3fn, ``[..., rows, cols]``), ``scale`` (one float32 factor per
    ``block``, ``[..., ceil(rows / br), ceil(cols / bc)]``; ``weight = qdata * scale``) and
    ``dtype``, what it dequantizes to. Indexing an expert, ``F.linear`` and
    ``dequantize()`` apply the scales (what :mod:`.parallel.quant`'s LoRA wrappers use)."""
    try:
        from torchao.quantization import Float8Tensor
    except ImportError as e:
        raise ConfigError(
            "model.quantize=fp8 keeps the checkpoint's fp8 experts as torchao tensors: pip "
            "install -e '.[quant]', or set model.quantize=none to dequantize them."
        ) from e
    block_size = [1] * (qdata.dim() - 2) + list(block)
    return Float8Tensor(qdata, scale.float(), block_size=block_size, dtype=dtype)


def _nbytes(t: torch.Tensor) -> int:
    """Bytes a tensor holds (a torchao tensor: its data and scales)."""
    names = getattr(t, "tensor_data_names", None)
    if names and type(t) is not torch.Tensor:
        return sum(_nbytes(getattr(t, n)) for n in names)
    return t.numel() * t.element_size()


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """What this rank holds of ``t``: a DTensor's local shard, else ``t`` itself."""
    return _local_box(t.data if isinstance(t, nn.Parameter) else t)[0]


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of ``t`` on this rank: a DTensor's local shard, a quantized tensor's data and
    scales."""
    return _nbytes(local_tensor(t))


def local_bytes(model: nn.Module) -> int:
    """Bytes of the tensors this rank holds (parameters and buffers, quantized ones
    with their scales): its share of the weights."""
    seen: set[int] = set()
    total = 0
    for t in [*model.parameters(), *model.buffers()]:
        if id(t) in seen:
            continue
        seen.add(id(t))
        total += tensor_bytes(t)
    return total
