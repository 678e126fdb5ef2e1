"""A quantized frozen base under LoRA: memory saved and log-prob drift on the tiny models.

For each tiny preset and each ``model.quantize`` kind (int8, fp8: torchao weight-only, one
scale per output row) this quantizes a LoRA model's frozen base and reports the bytes of
the quantized weights before and after and the per-token log-prob difference against the
full-precision base on random token sequences, adapter off (the reference policy) and on
(the adapter's B initialised away from zero so that it acts). The tiny models have random
weights: real checkpoints have other weight statistics, so these figures show that the
path works and its order of magnitude, not what a real model loses.

    python -m agentgym.benchmarks.perf.quant_base
"""

from __future__ import annotations

from typing import Any

import torch

from agentgym.generation import build_preset, build_tokenizer
from agentgym.trainers import LoraSettings, apply_lora
from agentgym.trainers.parallel import quantization_error


def measure(preset: str, kind: str, *, seqs: int = 8, length: int = 64) -> dict[str, float]:
    """:func:`quantization_error` of ``preset`` with a LoRA adapter, quantized as ``kind``."""
    tokenizer = build_tokenizer()
    model = build_preset(preset, tokenizer, seed=0)
    model = apply_lora(model, LoraSettings(r=8, alpha=16), seed=1)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    ids = torch.randint(3, model.config.vocab_size, (seqs, length), generator=gen)
    return quantization_error(model, kind, ids)


def run(quick: bool = False) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for preset in ("tiny-qwen2", "tiny-deepseek-v3"):
        for kind in ("int8", "fp8"):
            m = measure(preset, kind, seqs=2 if quick else 8)
            for k, v in m.items():
                figures[f"{preset}/{kind}/{k}"] = round(v, 6)
    return {
        "title": "LoRA on a quantized frozen base (torchao weight-only int8 / fp8)",
        "figures": figures,
        "notes": "bytes of the quantized weights (decoder Linear layers and expert stacks; "
        "scales included); |log p| differences per token against the full-precision base, "
        "random-weight tiny models, 8 sequences x 64 tokens.",
    }


if __name__ == "__main__":
    torch.set_num_threads(1)
    for name, value in run()["figures"].items():
        print(f"{name:60s} {value}")
