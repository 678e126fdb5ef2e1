"""The fused decode step computes what the model's own forward computes."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import TINY_QWEN

from agentgym import Message, SamplingParams
from agentgym.generation import (
    GenerationRequest,
    HFEngine,
    HFEngineOptions,
    build_preset,
    merged_lora,
)
from agentgym.generation.fast_attention import growing_kv_layer_class
from agentgym.generation.fused import FusedDecoder, supported
from agentgym.trainers.config import LoraSettings
from agentgym.trainers.models import apply_lora


def _llama(tokenizer, **extra):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **extra,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # biases start at zero: make them matter
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(std=0.5)
    return model


def _models(tokenizer):
    qwen = build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN, seed=0).eval()
    with torch.no_grad():  # Qwen2 has q/k/v biases: make them matter
        for layer in qwen.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(std=0.5)
    return {
        "qwen2 (q/k/v biases)": qwen,
        "llama (GQA)": _llama(tokenizer),
        "llama (linear RoPE scaling, attention and MLP biases)": _llama(
            tokenizer,
            attention_bias=True,
            mlp_bias=True,
            rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
        ),
    }


@pytest.mark.parametrize("index", [0, 1, 2], ids=["qwen2-bias", "llama-gqa", "llama-rope-linear"])
def test_fused_step_equals_the_model_forward(tokenizer, index):
    model = list(_models(tokenizer).values())[index]
    assert supported(model)
    layer_cls = growing_kv_layer_class()
    from transformers import DynamicCache

    prompts = torch.tensor([[5, 9, 7, 11, 12, 13], [0, 0, 8, 21, 6, 30]])
    attention = (prompts != 0).long()
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    cache.layers = [layer_cls(64) for _ in cache.layers]
    with torch.inference_mode():
        model(
            input_ids=prompts,
            attention_mask=attention,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        )
        fused_cache = copy.deepcopy(cache)
        fused = FusedDecoder.build(model, 64)
        assert fused is not None
        mask = torch.where(attention.bool(), 0.0, torch.finfo(torch.float32).min)[:, None, None]
        tokens = torch.tensor([17, 3])
        pos = positions[:, -1:] + 1
        for _ in range(5):
            mask = torch.cat([mask, torch.zeros(2, 1, 1, 1)], dim=-1)
            want = model(
                input_ids=tokens[:, None],
                attention_mask=mask,
                position_ids=pos,
                past_key_values=cache,
                use_cache=True,
            ).logits[:, -1]
            got = fused.step(tokens, pos, fused_cache, mask)
            assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
            tokens, pos = want.argmax(-1), pos + 1


def test_engine_gives_the_same_tokens_with_and_without_the_fused_step(tokenizer):
    model = apply_lora(_llama(tokenizer), LoraSettings(r=4), seed=1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(std=0.5, generator=torch.Generator().manual_seed(len(n)))
    reqs = [
        GenerationRequest(
            (Message("user", f"question {i}"),),
            SamplingParams(max_tokens=6 + 3 * i, temperature=0.0 if i == 2 else 1.0, seed=i),
        )
        for i in range(4)
    ]
    fused = HFEngine(model, tokenizer).generate(reqs)
    plain = HFEngine(model, tokenizer, HFEngineOptions(fused=False)).generate(reqs)
    assert [c.token_ids for c in fused] == [c.token_ids for c in plain]
    for a, b in zip(fused, plain, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_models_the_fused_step_does_not_reproduce_are_left_to_their_forward(tokenizer):
    assert not supported(build_preset("tiny-deepseek-v3", tokenizer))  # MLA + MoE
    lora = apply_lora(build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN), LoraSettings(r=4))
    assert not supported(lora)  # the peft wrapper itself
    assert not supported(lora.get_base_model())  # LoRA layers not folded
    with torch.no_grad(), merged_lora(lora) as folded:
        assert folded and supported(lora.get_base_model())
    dynamic = _llama(
        tokenizer, rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}
    )
    assert not supported(dynamic)  # RoPE that depends on the sequence length
    assert FusedDecoder.build(dynamic, 32) is None
