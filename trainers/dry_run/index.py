"""A checkpoint's headers without its weights: what a dry run reads its loading plan from.

:func:`describe_checkpoint` writes a folder that :class:`~agentgym.trainers.hf_reader.CheckpointReader`
and :func:`~agentgym.trainers.loading.meta_model_and_tokenizer` open like the published one:
``config.json``, a tokenizer, ``model.safetensors.index.json`` and safetensors shards that
hold their headers only (names, dtypes, shapes, data offsets; no data). The names, dtypes
and shapes follow the model's own state dict in the published layout
(:func:`published_tensors`): one ``experts.{e}.{gate,up,down}_proj.weight`` per routed
expert where transformers fuses them, and, for DeepSeek-V3's fp8 release, every Linear
weight of a decoder layer in ``float8_e4m3fn`` with its ``weight_scale_inv`` (one float32
per 128 x 128 block) beside it, the router, norms, embedding and head in bf16, the
router's score-correction bias in float32. The shard files follow the published count
only roughly (about 4.3 GB each, in name order); the multi-token-prediction layer the
release also ships (``model.layers.61``) is left out: transformers does not load it.

A dry run (:mod:`.rank`) allocates fake tensors, so the reader reads nothing and counts
the bytes it would have read: the loading plan of a rank against this index.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

from torch import nn

#: DeepSeek-V3's published quantization (config.json)
FP8_CONFIG = {
    "quant_method": "fp8",
    "fmt": "e4m3",
    "activation_scheme": "dynamic",
    "weight_block_size": [128, 128],
}
#: the published shards are about this large
SHARD_BYTES = 4_300_000_000
_BYTES = {"F8_E4M3": 1, "BF16": 2, "F32": 4}


def published_tensors(model: nn.Module, *, fp8: bool) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name -> (shape, safetensors dtype) of every tensor a checkpoint of ``model`` (a
    Hugging Face causal LM, meta or not) holds in the published layout (module docstring)."""
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for name, t in model.state_dict().items():
        shape = tuple(t.shape)
        head, _, leaf = name.rpartition(".")
        if leaf in ("gate_up_proj", "down_proj") and head.endswith("experts") and len(shape) == 3:
            experts, rows, cols = shape
            parts = (
                (("gate_proj", rows // 2), ("up_proj", rows // 2))
                if leaf == "gate_up_proj"
                else (("down_proj", rows),)
            )
            for e in range(experts):
                for part, r in parts:
                    _linear(out, f"{head}.{e}.{part}.weight", (r, cols), fp8)
            continue
        in_layer = ".layers." in name and name.endswith(".weight") and len(shape) == 2
        if in_layer and not name.endswith("mlp.gate.weight"):
            _linear(out, name, shape, fp8)
        elif name.endswith("e_score_correction_bias"):
            out[name] = (shape, "F32")
        else:
            out[name] = (shape, "BF16")
    return out


def _linear(out: dict[str, Any], name: str, shape: tuple[int, ...], fp8: bool) -> None:
    if not fp8:
        out[name] = (shape, "BF16")
        return
    out[name] = (shape, "F8_E4M3")
    out[f"{name}_scale_inv"] = ((math.ceil(shape[0] / 128), math.ceil(shape[1] / 128)), "F32")


def describe_checkpoint(
    config: dict[str, Any], folder: str | Path, *, fp8: bool, tokenizer: Any = None
) -> Path:
    """Write the header-only checkpoint of the model ``config`` (``config.json`` fields,
    e.g. a trainer config's ``model.architecture``) into ``folder``; returns it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fields = dict(config)
    model_type = fields.pop("model_type")
    hf = AutoConfig.for_model(model_type, **fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf)
    tensors = published_tensors(model, fp8=fp8)
    written = json.loads(hf.to_json_string())
    if fp8:
        written["quantization_config"] = FP8_CONFIG
    (folder / "config.json").write_text(json.dumps(written, indent=1))
    _write_shards(folder, tensors)
    if tokenizer is None:
        from agentgym.generation import build_tokenizer

        tokenizer = build_tokenizer()
    tokenizer.save_pretrained(str(folder))
    return folder


def _write_shards(folder: Path, tensors: dict[str, tuple[tuple[int, ...], str]]) -> None:
    """The shards' headers (data offsets as if the data followed) and the index."""
    shards: list[dict[str, Any]] = [{}]
    size = 0
    for name in sorted(tensors, key=_natural):
        shape, dtype = tensors[name]
        n = math.prod(shape) * _BYTES[dtype]
        if size and size + n > SHARD_BYTES:
            shards.append({})
            size = 0
        shards[-1][name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [size, size + n]}
        size += n
    count = len(shards)
    weight_map, total = {}, 0
    for i, header in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{count:06d}.safetensors"
        body = json.dumps({"__metadata__": {"format": "pt"}, **header}).encode()
        body += b" " * (-len(body) % 8)
        (folder / file).write_bytes(struct.pack("<Q", len(body)) + body)
        for name, meta in header.items():
            weight_map[name] = file
            total += meta["data_offsets"][1] - meta["data_offsets"][0]
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))


def _natural(name: str) -> list[Any]:
    """Layer numbers sort as numbers (``layers.2`` before ``layers.10``)."""
    return [int(p) if p.isdigit() else p for p in name.split(".")]
