"""The learner: a prompt shared by several samples is computed once, with the same result."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import TINY_QWEN

from agentgym.generation import build_preset
from agentgym.trainers.batch import Sample, make_microbatches
from agentgym.trainers.config import AlgorithmConfig, LoraSettings, OptimConfig
from agentgym.trainers.learner import Learner
from agentgym.trainers.models import apply_lora
from agentgym.trainers.update import update_policy

PRESETS = [("tiny-qwen2", TINY_QWEN), ("tiny-deepseek-v3", {})]


def _samples(vocab: int, seed: int = 0) -> list[Sample]:
    """Three prompts of different lengths, 4 samples each, replies of 1 to 9 tokens."""
    rng = random.Random(seed)
    out = []
    for task, plen in enumerate([5, 11, 8]):
        prompt = tuple(rng.randrange(4, vocab) for _ in range(plen))
        for g in range(4):
            n = 1 if (task, g) == (0, 0) else rng.randint(2, 9)  # one single-token reply
            reply = tuple(rng.randrange(4, vocab) for _ in range(n))
            out.append(Sample(prompt, reply, rng.gauss(0.0, 1.0), task * 4 + g))
    return out


def _learner(preset: str, overrides: dict, tokenizer, *, share: bool) -> Learner:
    model = apply_lora(
        build_preset(preset, tokenizer, overrides=overrides, seed=3), LoraSettings(r=4), seed=5
    )
    with torch.no_grad():  # a non-zero adapter, so that its gradients are not trivial
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.05, generator=torch.Generator().manual_seed(len(name)))
    algo = AlgorithmConfig(micro_batch_size=16, share_prompts=share)
    return Learner(model, algo, OptimConfig(lr=1e-2), pad_id=tokenizer.pad_token_id)


def _grads(learner: Learner, samples: list[Sample]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    (mb,) = make_microbatches(samples, 16, learner.pad_id)
    learner.model.train()
    learner.model.zero_grad(set_to_none=True)
    logits = learner._compute("logits")(mb)
    logp = torch.log_softmax(logits / 0.9, dim=-1).gather(-1, mb.targets[..., None])[..., 0]
    loss = -(logp * mb.advantages[:, None] * mb.loss_mask).sum() / mb.loss_mask.sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in learner.model.named_parameters() if p.grad is not None}
    return logp.detach() * mb.loss_mask, grads


@pytest.mark.parametrize(("preset", "overrides"), PRESETS)
def test_shared_prompt_forward_equals_one_sequence_per_sample(tokenizer, preset, overrides):
    samples = _samples(len(tokenizer))
    (mb,) = make_microbatches(samples, 16, tokenizer.pad_token_id)
    assert mb.num_prompts == 3 and mb.num_samples == 12  # the prompts really are shared
    shared = _learner(preset, overrides, tokenizer, share=True)
    plain = _learner(preset, overrides, tokenizer, share=False)
    logp_a, grads_a = _grads(shared, samples)
    logp_b, grads_b = _grads(plain, samples)
    assert torch.allclose(logp_a, logp_b, atol=1e-5)
    assert grads_a.keys() == grads_b.keys() and grads_a
    if preset == "tiny-deepseek-v3":
        assert any(".experts." in n for n in grads_a)
    for name in grads_a:
        assert torch.allclose(grads_a[name], grads_b[name], atol=1e-5, rtol=1e-4), name
    # keys/values of the prompt reach the replies only through the copied cache: their
    # adapter gradients above are equal only if the backward pass flows through it
    assert any(float(g.abs().sum()) > 0 for n, g in grads_a.items() if "k_proj" in n or "kv_" in n)


def test_plain_layout_logits_predict_the_sampled_tokens(tokenizer):
    # sequences() + the logit slice agree with a one-sample forward on prompt + reply
    samples = _samples(len(tokenizer), seed=1)
    learner = _learner("tiny-qwen2", TINY_QWEN, tokenizer, share=False)
    learner.model.eval()
    (mb,) = make_microbatches(samples, 16, tokenizer.pad_token_id)
    with torch.no_grad():
        batch = torch.log_softmax(learner._compute("logits")(mb), -1)
        for row, i in enumerate(mb.indices):
            s = samples[i]
            ids = torch.tensor([[*s.prompt_ids, *s.response_ids]])
            alone = torch.log_softmax(learner.model(input_ids=ids).logits[0].float(), -1)
            p, n = len(s.prompt_ids), len(s.response_ids)
            assert torch.allclose(batch[row, :n], alone[p - 1 : p - 1 + n], atol=1e-5)


def test_update_is_the_same_with_and_without_prompt_sharing(tokenizer):
    samples = _samples(len(tokenizer), seed=2)
    results = []
    for share in (True, False):
        learner = _learner("tiny-qwen2", TINY_QWEN, tokenizer, share=share)
        metrics = update_policy(learner, samples, AlgorithmConfig(), temperature=0.9)
        lora = {n: p.detach().clone() for n, p in learner.model.named_parameters() if "lora_" in n}
        results.append((metrics, lora))
    (m_a, w_a), (m_b, w_b) = results
    assert (
        m_a["charts/train_tokens"]
        == m_b["charts/train_tokens"]
        == sum(len(s.response_ids) for s in samples)
    )
    for key in ("losses/total", "losses/entropy", "losses/grad_norm"):
        assert m_a[key] == pytest.approx(m_b[key], rel=1e-4, abs=1e-6), key
    for name in w_a:
        assert torch.allclose(w_a[name], w_b[name], atol=1e-6), name


def test_micro_batches_keep_samples_of_one_prompt_together(tokenizer):
    samples = _samples(len(tokenizer), seed=3)
    random.Random(0).shuffle(samples)
    mbs = make_microbatches(samples, 4, tokenizer.pad_token_id)
    assert [mb.num_prompts for mb in mbs] == [1, 1, 1]
    assert sorted(i for mb in mbs for i in mb.indices) == list(range(len(samples)))
    for mb in mbs:
        for row, i in enumerate(mb.indices):
            s = samples[i]
            prompt_row = mb.prompt_ids[mb.prompt_of[row]][mb.prompt_mask[mb.prompt_of[row]] > 0]
            assert tuple(prompt_row.tolist()) == s.prompt_ids
            assert mb.targets[row][mb.loss_mask[row] > 0].tolist() == list(s.response_ids)


@pytest.mark.parametrize(("preset", "overrides"), PRESETS)
def test_lora_as_one_matmul_gives_peft_gradients(tokenizer, preset, overrides):
    from agentgym.trainers.fused_lora import fused_lora_forward

    samples = _samples(len(tokenizer), seed=4)
    learner = _learner(preset, overrides, tokenizer, share=True)
    model = learner.model
    logp_peft, grads_peft = _grads(learner, samples)
    forwards = {n: m.forward for n, m in model.named_modules()}
    with fused_lora_forward(model) as n_fused:
        logp_fused, grads_fused = _grads(learner, samples)
    # every attention projection is fused; MoE expert parameters keep peft's path
    assert n_fused == 4 * model.config.num_hidden_layers if preset == "tiny-qwen2" else n_fused > 0
    assert {n: m.forward for n, m in model.named_modules()} == forwards  # put back
    assert torch.allclose(logp_fused, logp_peft, atol=1e-5)
    assert grads_fused.keys() == grads_peft.keys()
    for name in grads_peft:
        assert torch.allclose(grads_fused[name], grads_peft[name], atol=1e-5, rtol=1e-4), name


def test_lora_layers_with_dropout_keep_peft_forward(tokenizer):
    from agentgym.trainers.fused_lora import fused_lora_forward

    model = apply_lora(
        build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN), LoraSettings(r=4, dropout=0.1)
    )
    with fused_lora_forward(model) as n_fused:
        assert n_fused == 0


@pytest.mark.parametrize("shares", [True, False])
def test_a_rollout_holds_the_generation_model_only_for_an_engine_that_uses_it(tokenizer, shares):
    """``weights_for``: the HF engine generates with the learner's model, so a rollout
    holds it (on a mesh: gathered on every rank); an engine with its own weights (vLLM)
    gets nothing gathered for it."""
    from agentgym.generation import HFEngine
    from agentgym.trainers.learner import weights_for

    learner = _learner("tiny-qwen2", TINY_QWEN, tokenizer, share=True)
    entered = []
    real = learner.generation

    def counted():
        entered.append(1)
        return real()

    learner.generation = counted
    engine = HFEngine(learner.model, tokenizer, shares_weights=shares)
    with weights_for(engine, learner) as held:
        assert (held is learner.model) == shares
    assert entered == ([1] if shares else [])
