"""Tiny DeepSeek-V3-shaped checkpoints written in-process in the published formats.

* :func:`write_sharded` -- ``save_pretrained`` output split into several safetensors
  files with ``model.safetensors.index.json`` (per-expert tensor names, as published);
* :func:`write_block_fp8` -- the same checkpoint in DeepSeek's fp8 format: every Linear
  weight of the decoder layers (the router's excepted) as ``float8_e4m3fn`` with a float32
  ``weight_scale_inv`` per 128 x 128 block (``ceil`` division: the last block of a
  dimension may be partial), and ``quantization_config`` in ``config.json``.

Used by the loading tests and by ``python tests/helpers/hf_checkpoints.py DIR``, which
writes ``DIR/big`` (:func:`write_synthetic`), ``DIR/small`` and ``DIR/fp8`` as the tests do,
for the measurement commands in docs/distributed.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

#: a DeepSeek-V3-shaped model whose Linear sizes are multiples of 128 (whole fp8 blocks
#: for the experts; MLA's small projections keep partial blocks, as the real one's do)
FP8_SHAPE = {
    "hidden_size": 256,
    "intermediate_size": 384,
    "moe_intermediate_size": 128,
    "num_hidden_layers": 3,
    "n_routed_experts": 8,
    "q_lora_rank": 64,
    "kv_lora_rank": 32,
}
#: the small model the multi-process tests train (cheap steps)
SMALL_SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 3,
    "n_routed_experts": 4,
}
QUANT_CONFIG = {
    "quant_method": "fp8",
    "fmt": "e4m3",
    "activation_scheme": "dynamic",
    "weight_block_size": [128, 128],
}


def tiny_model(seed: int = 0, **overrides: Any) -> tuple[torch.nn.Module, Any]:
    """The tiny DeepSeek-V3 preset with ``overrides`` (default :data:`FP8_SHAPE`)."""
    from agentgym.generation import build_preset, build_tokenizer

    tokenizer = build_tokenizer()
    model = build_preset("tiny-deepseek-v3", tokenizer, seed=seed, overrides=overrides or FP8_SHAPE)
    return model, tokenizer


def write_sharded(model: torch.nn.Module, tokenizer: Any, path: Path, shards: int = 4) -> Path:
    """``model`` saved with ``save_pretrained`` and re-split into ``shards`` files plus
    the index (tensors dealt out in name order)."""
    from agentgym.generation import save_model

    save_model(model, tokenizer, path)
    state = load_file(str(path / "model.safetensors"))
    (path / "model.safetensors").unlink()
    _save_shards(state, path, shards)
    return path


#: a larger DeepSeek-V3 shape for the memory measurements (its weights, ~170 MB in
#: float32, dwarf a process's fixed costs)
MEASURE_SHAPE = {
    "hidden_size": 768,
    "intermediate_size": 2048,
    "moe_intermediate_size": 512,
    "num_hidden_layers": 3,
    "n_routed_experts": 16,
    "q_lora_rank": 256,
    "kv_lora_rank": 128,
}


def write_synthetic(path: Path, shards: int = 6, **overrides: Any) -> Path:
    """A checkpoint of the tiny DeepSeek-V3 preset with ``overrides`` (default
    :data:`MEASURE_SHAPE`) holding random values, written fast (no model is built): the
    published per-expert names, ``shards`` files and the index."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    from agentgym.generation import PRESETS, build_tokenizer

    tokenizer = build_tokenizer()
    fields = {**PRESETS["tiny-deepseek-v3"], **(overrides or MEASURE_SHAPE)}
    config = DeepseekV3Config(**fields, vocab_size=len(tokenizer))
    config.architectures = ["DeepseekV3ForCausalLM"]
    with torch.device("meta"):
        meta = DeepseekV3ForCausalLM(config)
    gen = torch.Generator().manual_seed(0)
    state = {}
    for name, t in meta.state_dict().items():
        if name.endswith("rotary_emb.inv_freq") or "original_inv_freq" in name:
            continue
        value = torch.randn(t.shape, generator=gen) * 0.02
        head, _, leaf = name.rpartition(".")
        if leaf == "gate_up_proj":
            for e, w in enumerate(value):
                state[f"{head}.{e}.gate_proj.weight"], state[f"{head}.{e}.up_proj.weight"] = (
                    w.chunk(2)
                )
        elif leaf == "down_proj" and head.endswith("experts"):
            for e, w in enumerate(value):
                state[f"{head}.{e}.down_proj.weight"] = w
        else:
            state[name] = value
    path.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    _save_shards(state, path, shards)
    return path


def _save_shards(state: dict[str, torch.Tensor], path: Path, shards: int) -> None:
    names = sorted(state)
    per = -(-len(names) // shards)
    weight_map = {}
    for i in range(shards):
        part = names[i * per : (i + 1) * per]
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: state[n].contiguous() for n in part}, str(path / file))
        weight_map.update(dict.fromkeys(part, file))
    total = sum(t.numel() * t.element_size() for t in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def quantize_blocks(w: torch.Tensor, block: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek's block fp8 of a 2-D weight: e4m3 values and float32 scales (one per
    block, ``amax / 448``), ``w ~= q * scale`` blockwise."""
    rows, cols = w.shape
    br, bc = -(-rows // block), -(-cols // block)
    padded = torch.zeros(br * block, bc * block)
    padded[:rows, :cols] = w.float()
    blocks = padded.reshape(br, block, bc, block)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / 448.0
    q = (blocks / scale[:, None, :, None]).reshape(padded.shape)[:rows, :cols]
    return q.to(torch.float8_e4m3fn).contiguous(), scale.float()


def is_fp8_weight(name: str, t: torch.Tensor) -> bool:
    """The tensors DeepSeek stores in fp8: 2-D Linear weights of the decoder layers but
    the router's."""
    return ".layers." in name and name.endswith("proj.weight") and t.dim() == 2


def write_block_fp8(
    model: torch.nn.Module, tokenizer: Any, path: Path, shards: int = 4
) -> dict[str, torch.Tensor]:
    """``model`` in DeepSeek's fp8 format at ``path``; returns the dequantized state
    dict (the weights the fp8 checkpoint stands for)."""
    from agentgym.generation import save_model

    save_model(model, tokenizer, path)
    state = load_file(str(path / "model.safetensors"))
    (path / "model.safetensors").unlink()
    out, dequantized = {}, {}
    for name, t in state.items():
        if is_fp8_weight(name, t):
            q, s = quantize_blocks(t)
            out[name], out[f"{name}_scale_inv"] = q, s
            full = s.repeat_interleave(128, 0).repeat_interleave(128, 1)
            dequantized[name] = q.float() * full[: t.shape[0], : t.shape[1]]
        else:
            out[name] = dequantized[name] = t
    _save_shards(out, path, shards)
    config = json.loads((path / "config.json").read_text())
    config["quantization_config"] = QUANT_CONFIG
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return dequantized


if __name__ == "__main__":  # the checkpoints of docs/distributed.md's measurements
    root = Path(sys.argv[1])
    write_synthetic(root / "big")
    write_sharded(*tiny_model(**SMALL_SHAPE), root / "small", shards=3)
    write_block_fp8(*tiny_model(), root / "fp8")
    print(root / "big", root / "small", root / "fp8")
