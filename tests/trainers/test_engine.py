"""The HF rollout engine and its batching policy."""

from __future__ import annotations

import asyncio

import pytest
import torch
from conftest import TINY_QWEN

from agentgym.trainers.algorithm import selected_logprobs
from agentgym.trainers.batch import Sample, make_microbatches
from agentgym.trainers.engines import GenerationRequest, HFEngine
from agentgym.trainers.models import adapter_state_dict, apply_lora, build_preset
from agentgym.trainers.tokenizer import encode_prompt
from agentgym.types import Message, SamplingParams


@pytest.fixture
def engine(tokenizer):
    model = apply_lora(build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN), r=4)
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
    with torch.no_grad():
        logits = engine.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits[
            :, :-1
        ]
    logp = selected_logprobs(logits, mb.targets, temperature=0.7)[mb.loss_mask > 0]
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
        build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN), r=4, seed=1
    )
    engine_model = apply_lora(
        build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN), r=4, seed=1
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
