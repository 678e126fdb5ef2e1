"""The HF rollout engine and its batching policy."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace

import pytest
import torch
from conftest import TINY_QWEN
from peft.tuners.lora import LoraLayer

from agentgym import ConfigError, Message, SamplingParams
from agentgym.generation import (
    GenerationRequest,
    HFEngine,
    HFEngineOptions,
    adapter_state_dict,
    build_preset,
    encode_prompt,
    merged_lora,
)
from agentgym.trainers.algorithm import selected_logprobs
from agentgym.trainers.batch import Sample, make_microbatches
from agentgym.trainers.config import LoraSettings
from agentgym.trainers.models import apply_lora


@pytest.fixture
def engine(tokenizer):
    model = apply_lora(
        build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN), LoraSettings(r=4)
    )
    return HFEngine(model, tokenizer)


def _req(i: int, seed: int | None = None, **kw) -> GenerationRequest:
    return GenerationRequest(
        (Message("user", f"question number {i}" + "!" * i),),
        SamplingParams(max_tokens=12, seed=seed, **kw),
    )


def test_seeded_completion_does_not_depend_on_its_batch(engine):
    reqs = [_req(i, seed=100 + i) for i in range(5)]
    together = engine.generate(reqs)
    alone = engine.generate([reqs[3]])[0]
    assert alone.token_ids == together[3].token_ids
    assert alone.logprobs == pytest.approx(together[3].logprobs, abs=1e-5)
    other_seed = engine.generate([_req(3, seed=7)])[0]
    assert other_seed.token_ids != alone.token_ids


def test_completion_fields_and_length_cap(engine, tokenizer):
    c = engine.generate([_req(1, seed=1)])[0]
    assert c.num_tokens == len(c.token_ids) == len(c.logprobs)
    assert c.num_tokens <= 12
    if c.finish_reason == "length":
        assert c.num_tokens == 12 and tokenizer.eos_token_id not in c.token_ids
    else:
        assert c.token_ids[-1] == tokenizer.eos_token_id
    assert c.prompt_tokens == len(encode_prompt(tokenizer, _req(1).messages))


def test_engine_logprobs_are_the_sampling_distribution(engine, tokenizer):
    # the engine's log-probs equal the learner's recomputation at the same temperature
    req = _req(2, seed=5, temperature=0.7)
    c = engine.generate([req])[0]
    sample = Sample(tuple(encode_prompt(tokenizer, req.messages)), c.token_ids, 0.0, 0)
    (mb,) = make_microbatches([sample], 4, tokenizer.pad_token_id)
    input_ids, attention, _ = mb.sequences()
    with torch.no_grad():
        logits = engine.model(input_ids=input_ids, attention_mask=attention).logits
    logp = selected_logprobs(mb.reply_logits(logits), mb.targets, temperature=0.7)
    logp = logp[mb.loss_mask > 0]
    assert logp.tolist() == pytest.approx(list(c.logprobs), abs=1e-4)


def test_greedy_is_deterministic_without_seed(engine):
    a = engine.generate([_req(4, temperature=0.0)])[0]
    b = engine.generate([_req(4, temperature=0.0)])[0]
    assert a.token_ids == b.token_ids


def test_stop_string_cuts_text(engine, tokenizer):
    c = engine.generate([_req(1, seed=3)])[0]
    text = c.text
    if len(text) < 3:
        pytest.skip("completion too short to cut")
    stop = text[1:3]
    d = engine.generate(
        [GenerationRequest(_req(1).messages, SamplingParams(max_tokens=12, seed=3, stop=(stop,)))]
    )[0]
    assert d.finish_reason == "stop"
    assert d.text == text[: text.find(stop)]
    assert tokenizer.decode(d.token_ids, skip_special_tokens=True).startswith(d.text + stop)


def test_policy_batches_concurrent_calls(engine):
    policy = engine.as_policy(max_batch=64, gather_window_s=0.01)
    reqs = [_req(i, seed=i) for i in range(6)]

    async def main():
        return await asyncio.gather(*(policy(r.messages, r.sampling) for r in reqs))

    out = asyncio.run(main())
    assert policy.batch_sizes == [6]
    assert [c.token_ids for c in out] == [c.token_ids for c in engine.generate(reqs)]
    # a second event loop (the trainer runs one per round) works with the same policy
    asyncio.run(main())
    assert policy.batch_sizes == [6, 6]
    policy.close()


def test_policy_respects_max_batch(engine):
    policy = engine.as_policy(max_batch=4, gather_window_s=0.01)

    async def main():
        return await asyncio.gather(
            *(policy(r.messages, r.sampling) for r in [_req(i, seed=i) for i in range(10)])
        )

    assert len(asyncio.run(main())) == 10
    assert max(policy.batch_sizes) <= 4 and sum(policy.batch_sizes) == 10
    policy.close()


def test_separate_engine_copy_follows_load_adapter(tokenizer):
    trainer_model = apply_lora(
        build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN), LoraSettings(r=4), seed=1
    )
    engine_model = apply_lora(
        build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN), LoraSettings(r=4), seed=1
    )
    with torch.no_grad():
        for n, p in trainer_model.named_parameters():
            if "lora_B" in n:
                p.normal_(std=2.0)
    local = HFEngine(trainer_model, tokenizer)
    remote = HFEngine(engine_model, tokenizer, shares_weights=False)
    reqs = [_req(i, seed=i) for i in range(4)]
    assert [c.token_ids for c in remote.generate(reqs)] != [
        c.token_ids for c in local.generate(reqs)
    ]
    remote.load_adapter(adapter_state_dict(trainer_model))
    assert [c.token_ids for c in remote.generate(reqs)] == [
        c.token_ids for c in local.generate(reqs)
    ]
    assert len(remote.busy) == 2 and remote.requests == 8


def _staggered(policy, reqs, delay):
    async def one(i, r):
        await asyncio.sleep(delay * i)
        return await policy(r.messages, r.sampling)

    async def main():
        return await asyncio.gather(*(one(i, r) for i, r in enumerate(reqs)))

    return asyncio.run(main())


def test_expect_hint_waits_for_every_episode_in_flight(engine):
    reqs = [_req(i, seed=i) for i in range(5)]
    plain = engine.as_policy(gather_window_s=0.001)
    _staggered(plain, reqs, 0.02)
    assert len(plain.batch_sizes) > 1  # arrivals 20 ms apart outlast the 1 ms window
    hinted = engine.as_policy(gather_window_s=0.001, max_wait_s=5.0)
    hinted.expect([(5, 5)])
    out = _staggered(hinted, reqs, 0.02)
    assert hinted.batch_sizes == [5]
    assert [c.token_ids for c in out] == [c.token_ids for c in engine.generate(reqs)]
    # concurrency 2 of 5 remaining: two in flight at once, so two waiting is enough
    capped = engine.as_policy(gather_window_s=0.001, max_wait_s=5.0)
    capped.expect([(5, 2)])
    _staggered(capped, reqs[:2], 0.02)
    assert capped.batch_sizes == [2]
    for p in (plain, hinted, capped):
        p.close()


def test_expect_hint_gives_up_after_max_wait(engine):
    policy = engine.as_policy(max_wait_s=0.05)
    policy.expect([(10, 10)])  # ten announced, three come: the batch still goes
    out = _staggered(policy, [_req(i, seed=i) for i in range(3)], 0.0)
    assert len(out) == 3 and policy.batch_sizes == [3]
    policy.episode_done(0)
    assert policy._expected == [[9, 10]]
    policy.close()


# ---------------------------------------------------------------------- the lean decode loop
def _mixed_requests() -> list[GenerationRequest]:
    """Prompts of different lengths (two shared), temperatures, top-p, greedy rows and
    per-request max_tokens, so rows leave the batch at different steps."""
    settings = [
        dict(max_tokens=12, temperature=1.0),
        dict(max_tokens=3, temperature=0.7, top_p=0.9),
        dict(max_tokens=20, temperature=0.0),
        dict(max_tokens=1, temperature=1.3, top_p=0.5),
        dict(max_tokens=16, temperature=1.0),
        dict(max_tokens=9, temperature=0.8),
    ]
    return [
        GenerationRequest(
            (Message("user", f"question {i % 4}" + "!" * (i % 3)),),
            SamplingParams(seed=300 + i, **settings[i % len(settings)]),
        )
        for i in range(9)
    ]


def _lora_model(tokenizer, preset: str, overrides=None):
    model = apply_lora(
        build_preset(preset, tokenizer, overrides=overrides, seed=0), LoraSettings(r=4), seed=1
    )
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a trained-looking adapter, so that it changes the outputs
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return model


@pytest.mark.parametrize(
    ("preset", "overrides"), [("tiny-qwen2", TINY_QWEN), ("tiny-deepseek-v3", None)]
)
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"merge_lora": False},
        {"fast_attention": False},
        {"merge_lora": False, "fast_attention": False},
        {"fused": False},
    ],
)
def test_lean_decode_matches_the_generate_path(tokenizer, preset, overrides, options):
    model = _lora_model(tokenizer, preset, overrides)
    reqs = _mixed_requests()
    ref = HFEngine(model, tokenizer, HFEngineOptions(decode="generate")).generate(reqs)
    got = HFEngine(model, tokenizer, HFEngineOptions(**options)).generate(reqs)
    assert [c.token_ids for c in got] == [c.token_ids for c in ref]
    assert [c.finish_reason for c in got] == [c.finish_reason for c in ref]
    assert [c.text for c in got] == [c.text for c in ref]
    for a, b in zip(got, ref, strict=True):
        # the same distribution up to float rounding (a folded adapter rounds differently)
        assert a.logprobs == pytest.approx(b.logprobs, abs=2e-5)
    assert [c.num_tokens for c in got] == [12, 3, 20, 1, 16, 9, 12, 3, 20]


def test_lean_decode_equals_a_one_row_reference(tokenizer):
    # reference: every request decoded alone, full forward over the whole sequence at
    # every step (no cache, no padding), sampled with its own seeded Gumbel noise
    model = _lora_model(tokenizer, "tiny-qwen2", TINY_QWEN)
    reqs = _mixed_requests()
    got = HFEngine(model, tokenizer).generate(reqs)
    for req, c in zip(reqs, got, strict=True):
        s = req.sampling
        gen = torch.Generator().manual_seed(s.seed)
        seq = encode_prompt(tokenizer, req.messages)
        ids, lps = [], []
        with torch.no_grad():
            for _ in range(s.max_tokens):
                logits = model(input_ids=torch.tensor([seq])).logits[0, -1].float()
                scaled = logits / (s.temperature or 1.0)
                if s.top_p < 1:
                    probs = scaled.softmax(-1)
                    order = probs.argsort(descending=True)
                    before = probs[order].cumsum(0) - probs[order]
                    scaled[order[before >= s.top_p]] = -math.inf
                logp = scaled.log_softmax(-1)
                u = torch.rand(logp.shape[-1], generator=gen).clamp(1e-20, 1 - 1e-7)
                tok = int((logp if s.temperature == 0 else logp - (-u.log()).log()).argmax())
                ids.append(tok)
                lps.append(float(logp[tok]))
                seq.append(tok)
                if tok == tokenizer.eos_token_id:
                    break
        assert list(c.token_ids) == ids
        assert list(c.logprobs) == pytest.approx(lps, abs=2e-5)


def test_rows_leaving_the_batch_do_not_change_the_others(tokenizer):
    model = _lora_model(tokenizer, "tiny-qwen2", TINY_QWEN)
    engine = HFEngine(model, tokenizer)
    long = [_req(i, seed=50 + i) for i in range(6)]
    short = [
        GenerationRequest(r.messages, replace(r.sampling, max_tokens=1 + i % 3)) if i % 2 else r
        for i, r in enumerate(long)
    ]
    a = engine.generate(long)
    before = engine.row_steps_total
    b = engine.generate(short)
    # finished rows left the batch: fewer row-steps than rows x steps
    assert engine.row_steps_total - before < 6 * 12
    for i in range(0, 6, 2):
        assert b[i].token_ids == a[i].token_ids
        assert b[i].logprobs == pytest.approx(a[i].logprobs, abs=1e-5)
    for i in range(1, 6, 2):
        assert b[i].token_ids == a[i].token_ids[: 1 + i % 3]


def test_rows_stop_at_eos(tokenizer):
    model = _lora_model(tokenizer, "tiny-qwen2", TINY_QWEN)
    with torch.no_grad():  # make eos likely, so rows end at different steps
        model.get_base_model().lm_head.weight[tokenizer.eos_token_id] *= 0.0
        model.get_base_model().lm_head.weight[tokenizer.eos_token_id] += 0.2 * torch.ones(32)
    reqs = [_req(i, seed=i) for i in range(12)]
    ref = HFEngine(model, tokenizer, HFEngineOptions(decode="generate")).generate(reqs)
    got = HFEngine(model, tokenizer).generate(reqs)
    assert [c.token_ids for c in got] == [c.token_ids for c in ref]
    stopped = [c for c in got if c.finish_reason == "stop"]
    assert stopped and all(c.token_ids[-1] == tokenizer.eos_token_id for c in stopped)
    assert len({c.num_tokens for c in got}) > 1


def test_stop_strings_end_rows_early_with_the_same_result(tokenizer):
    model = _lora_model(tokenizer, "tiny-qwen2", TINY_QWEN)
    messages = _req(1).messages
    free = HFEngine(model, tokenizer).generate(
        [GenerationRequest(messages, SamplingParams(max_tokens=40, seed=s)) for s in (3, 4)]
    )
    # a stop string that first appears well into the first reply (past a stop check)
    text = free[0].text
    at = next(
        i
        for i in range(12, len(text) - 1)
        if text[i : i + 2].isascii()
        and text[i : i + 2].isalnum()
        and text.find(text[i : i + 2]) == i
    )
    stop = text[at : at + 2]
    reqs = [
        GenerationRequest(messages, SamplingParams(max_tokens=40, seed=3, stop=(stop,))),
        GenerationRequest(messages, SamplingParams(max_tokens=40, seed=4, stop=("\x00never",))),
    ]
    ref = HFEngine(model, tokenizer, HFEngineOptions(decode="generate")).generate(reqs)
    lean = HFEngine(model, tokenizer)
    got = lean.generate(reqs)
    assert [(c.token_ids, c.text, c.finish_reason) for c in got] == [
        (c.token_ids, c.text, c.finish_reason) for c in ref
    ]
    assert got[0].finish_reason == "stop" and got[0].text == text[:at]
    assert got[0].num_tokens < 40 and got[1].token_ids == free[1].token_ids
    # the stopped row left the batch before the other finished
    assert lean.row_steps_total < 2 * 40


def test_folded_adapter_restores_the_exact_weights(tokenizer):
    for preset, overrides in (("tiny-qwen2", TINY_QWEN), ("tiny-deepseek-v3", None)):
        model = _lora_model(tokenizer, preset, overrides)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        ids = {k: v.data_ptr() for k, v in model.state_dict().items()}
        modules = {name: m for name, m in model.named_modules()}
        with merged_lora(model) as folded:
            assert folded
            assert not any(isinstance(m, LoraLayer) for m in model.modules())
            x = torch.tensor([[5, 6, 7]])
            with torch.no_grad():
                merged = model(input_ids=x).logits
        with torch.no_grad():
            plain = model(input_ids=x).logits
        assert torch.allclose(merged, plain, atol=1e-5)
        after = model.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before)
        assert all(after[k].data_ptr() == ids[k] for k in ids)  # the very same tensors
        assert dict(model.named_modules()) == modules  # the adapter wrappers are back
        # an error inside the block restores them too
        with pytest.raises(RuntimeError), merged_lora(model):
            raise RuntimeError("boom")
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
        # the adapter is live again outside the block
        with torch.no_grad(), model.disable_adapter():
            base = model(input_ids=x).logits
        assert not torch.allclose(base, plain, atol=1e-3)


def test_no_adapter_or_full_model_decodes_the_same(tokenizer):
    model = build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN, seed=0)
    with merged_lora(model) as folded:
        assert not folded
    reqs = _mixed_requests()
    ref = HFEngine(model, tokenizer, HFEngineOptions(decode="generate")).generate(reqs)
    got = HFEngine(model, tokenizer).generate(reqs)
    assert [c.token_ids for c in got] == [c.token_ids for c in ref]


def test_decode_option_is_checked(tokenizer):
    with pytest.raises(ConfigError, match="decode"):
        HFEngine(
            build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN),
            tokenizer,
            HFEngineOptions(decode="x"),
        )


def test_engine_keeps_training_mode(tokenizer):
    model = _lora_model(tokenizer, "tiny-qwen2", TINY_QWEN)
    model.train()
    HFEngine(model, tokenizer).generate([_req(1, seed=1)])
    assert model.training
