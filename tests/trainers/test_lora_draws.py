"""The adapter's first values drawn per rank (trainers/lora_draws.py): what one process
draws with the same seed, any box of any adapter tensor, without drawing the others'.

* peft run on a meta-built model records its draws; replayed whole, they are the values
  ``apply_lora`` draws on a loaded base, float32 and bf16 bases (peft rounds a new
  adapter through its base layer's dtype);
* a box (an expert share's rows, a tensor-parallel slice's columns) replayed alone equals
  that box of the whole draw, and the scratch a replay holds is one chunk.
"""

from __future__ import annotations

import pytest
import torch

from agentgym.generation import adapter_state_dict, build_preset, build_tokenizer
from agentgym.trainers.config import LoraSettings
from agentgym.trainers.lora_draws import DRAWS_ATTR, AdapterDraws
from agentgym.trainers.models import apply_lora, apply_lora_on_meta

LORA = LoraSettings(r=4, alpha=8)


def _pair(dtype: torch.dtype) -> tuple[torch.nn.Module, AdapterDraws]:
    """The tiny DeepSeek-V3 with its adapter drawn by peft, and the meta-built one's
    record of the same draws."""
    tok = build_tokenizer()
    loaded = build_preset("tiny-deepseek-v3", tok, seed=0).to(dtype)
    want = apply_lora(loaded, LORA, seed=7)
    with torch.device("meta"):
        meta = build_preset("tiny-deepseek-v3", tok, seed=0)
    meta = meta.to(dtype)
    got = apply_lora_on_meta(meta, LORA, seed=7)
    assert all(p.is_meta for p in got.parameters())
    return want, getattr(got, DRAWS_ATTR)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_replayed_draws_are_what_one_process_draws(dtype):
    want, draws = _pair(dtype)
    params = dict(want.named_parameters())
    assert set(draws.final) == {n for n in params if "lora_" in n}
    wants = []
    for name in draws.final:
        shape, dt = draws.shapes[name]
        wants.append((name, torch.full(shape, float("nan"), dtype=dt), [(0, n) for n in shape]))
    draws.fill(wants)
    for name, got, _ in wants:
        assert got.dtype == params[name].dtype
        assert torch.equal(got, params[name].detach()), name
    # lora_A drawn (nonzero), lora_B zero, as peft leaves them
    assert all(bool(t.abs().sum() > 0) == (".lora_A." in n) for n, t, _ in wants)
    assert adapter_state_dict(want)  # the reference is a real peft adapter


def test_a_box_alone_is_that_box_of_the_whole_draw(monkeypatch):
    import agentgym.trainers.lora_draws as lora_draws

    want, draws = _pair(torch.float32)
    params = dict(want.named_parameters())
    expert_a = next(n for n in draws.final if "experts" in n and ".lora_A." in n)
    attn_a = next(n for n in draws.final if "o_proj" in n and ".lora_A." in n)
    rows = params[expert_a].shape[0]
    cols = params[attn_a].shape[1]
    boxes = [
        (expert_a, [(rows // 2, rows // 2 + LORA.r), (0, params[expert_a].shape[1])]),
        (attn_a, [(0, LORA.r), (cols // 2, cols)]),  # a row-wise split's columns
    ]
    monkeypatch.setattr(lora_draws, "CHUNK", 64)  # many blocks, skips and partial rows
    wants = [(n, torch.empty(b[0][1] - b[0][0], b[1][1] - b[1][0]), b) for n, b in boxes]
    draws.fill(wants)
    for name, got, box in wants:
        (r0, r1), (c0, c1) = box
        assert torch.equal(got, params[name].detach()[r0:r1, c0:c1]), name
