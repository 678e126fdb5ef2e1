"""Tiny presets, loading from a local path, LoRA targets and what trains."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import TINY_QWEN

from agentgym.errors import ConfigError, UnknownNameError
from agentgym.generation import (
    adapter_state_dict,
    build_preset,
    build_tokenizer,
    encode_completion,
    encode_prompt,
    load_adapter_state_dict,
    load_model,
    save_model,
)
from agentgym.trainers.config import LoraSettings
from agentgym.trainers.models import apply_lora, fused_expert_parameters, lora_ranks
from agentgym.types import Message

PRESETS = [("tiny-qwen2", TINY_QWEN), ("tiny-deepseek-v3", {})]


def _ids(tokenizer):
    ids = encode_prompt(tokenizer, [Message("user", "What is 2 + 3?")]) + encode_completion(
        tokenizer, "5"
    )
    return torch.tensor([ids])


@pytest.mark.parametrize(("preset", "overrides"), PRESETS)
def test_preset_save_and_load_round_trip(tmp_path, tokenizer, preset, overrides):
    model = build_preset(preset, tokenizer, seed=3, overrides=overrides)
    again = build_preset(preset, tokenizer, seed=3, overrides=overrides)
    x = _ids(tokenizer)
    with torch.no_grad():
        ref = model(input_ids=x).logits
        assert torch.equal(ref, again(input_ids=x).logits)  # seeded init, global RNG irrelevant
        save_model(model, tokenizer, tmp_path / "m")
        loaded, tok2 = load_model(tmp_path / "m")
        assert torch.allclose(loaded(input_ids=x).logits, ref, atol=1e-6)
    assert encode_prompt(tok2, [Message("user", "hi 42")]) == encode_prompt(
        tokenizer, [Message("user", "hi 42")]
    )
    assert tok2.eos_token_id == tokenizer.eos_token_id


def test_load_model_needs_a_model_directory(tmp_path):
    with pytest.raises(ConfigError, match=r"config\.json"):
        load_model(tmp_path)


def test_unknown_preset_suggests():
    with pytest.raises(UnknownNameError, match="tiny-qwen2"):
        build_preset("tiny-qwen", build_tokenizer())


def test_bpe_tokenizer_splits_digits_and_round_trips():
    tok = build_tokenizer(["What is 12 + 35? The answer is 47."] * 20, vocab_size=300)
    ids = tok("What is 123 + 45?", add_special_tokens=False)["input_ids"]
    tokens = tok.convert_ids_to_tokens(ids)
    assert "What" in tokens  # a learned merge
    assert {"1", "2", "3", "4", "5"} <= set(tokens)  # digits one per token
    assert tok.decode(ids) == "What is 123 + 45?"


def test_dense_lora_targets_attention_only(tokenizer):
    model = apply_lora(
        build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN), LoraSettings(r=4)
    )
    targets = model.agentgym_lora_targets
    assert {n.split(".")[-1] for n in targets.modules} == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert targets.parameters == ()
    assert set(lora_ranks(model).values()) == {4}


def test_moe_lora_targets_attention_and_fused_experts(tokenizer):
    base = build_preset("tiny-deepseek-v3", tokenizer)
    experts = fused_expert_parameters(base)
    assert experts == {
        "model.layers.1.mlp.experts.gate_up_proj": 4,
        "model.layers.1.mlp.experts.down_proj": 4,
    }
    model = apply_lora(base, LoraSettings(r=2))
    ranks = lora_ranks(model)
    assert ranks["model.layers.1.mlp.experts.gate_up_proj"] == 2 * 4  # r per expert
    assert ranks["model.layers.1.mlp.experts.down_proj"] == 2 * 4
    assert ranks["model.layers.0.self_attn.kv_a_proj_with_mqa"] == 2


def test_moe_mlp_names_are_rejected_instead_of_silently_remapped(tokenizer):
    base = build_preset("tiny-deepseek-v3", tokenizer)
    with pytest.raises(ConfigError, match="adapted but not asked for"):
        apply_lora(
            base,
            LoraSettings(
                r=2,
                target_modules=["q_a_proj", "gate_proj", "up_proj", "down_proj"],
                target_experts=False,
            ),
        )


def test_unknown_target_module_suggests(tokenizer):
    with pytest.raises(UnknownNameError, match="q_proj"):
        apply_lora(
            build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN),
            LoraSettings(target_modules=["q_prj"]),
        )


@pytest.mark.parametrize(("preset", "overrides"), PRESETS)
def test_lora_weights_move_base_weights_do_not(tokenizer, preset, overrides):
    base = build_preset(preset, tokenizer, overrides=overrides)
    frozen_copy = copy.deepcopy(base)
    model = apply_lora(base, LoraSettings(r=4))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    x = _ids(tokenizer)
    for _ in range(3):
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    for n, p in model.named_parameters():
        moved = not torch.equal(p.detach(), before[n])
        assert moved == (n in trainable), n
    if preset == "tiny-deepseek-v3":
        moved_experts = [
            n
            for n in trainable
            if ".experts." in n and not torch.equal(before[n], dict(model.named_parameters())[n])
        ]
        assert len(moved_experts) == 4  # lora_A and lora_B of gate_up_proj and down_proj
    # the reference policy is the same model with the adapter off: exactly the base model
    with torch.no_grad(), model.disable_adapter():
        ref = model(input_ids=x).logits
    with torch.no_grad():
        assert torch.allclose(ref, frozen_copy(input_ids=x).logits, atol=1e-6)
        assert not torch.allclose(model(input_ids=x).logits, ref, atol=1e-4)


def test_adapter_state_round_trip_into_a_separate_copy(tokenizer):
    a = apply_lora(
        build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN), LoraSettings(r=4), seed=1
    )
    b = apply_lora(
        build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN), LoraSettings(r=4), seed=2
    )
    with torch.no_grad():
        for n, p in a.named_parameters():
            if "lora_B" in n:
                p.normal_()
    x = _ids(tokenizer)
    load_adapter_state_dict(b, adapter_state_dict(a))
    with torch.no_grad():
        assert torch.allclose(a(input_ids=x).logits, b(input_ids=x).logits, atol=1e-6)


def test_encode_prompt_remembers_prompts_and_follows_the_chat_template():
    tok = build_tokenizer()
    msgs = [Message("system", "Be brief."), Message("user", "What is 2 + 3?")]
    first = encode_prompt(tok, msgs)
    first.append(-1)  # callers get their own list
    again = encode_prompt(tok, msgs)
    assert again == first[:-1]
    text = tok.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in msgs],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert again == tok(text, add_special_tokens=False)["input_ids"]
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert (
        encode_prompt(tok, msgs)
        == tok("Be brief.What is 2 + 3?", add_special_tokens=False)["input_ids"]
    )  # a new template is not answered from the cache
