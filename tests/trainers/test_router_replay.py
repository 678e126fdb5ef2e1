"""MoE router replay: the engine records its expert choices, the learner replays them."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from conftest import TINY_QWEN, train_in_processes

from agentgym import ConfigError, Message, SamplingParams, load_config
from agentgym.generation import (
    GenerationRequest,
    HFEngine,
    build_preset,
    build_tokenizer,
    encode_prompt,
    moe_routers,
)
from agentgym.trainers.algorithm import selected_logprobs
from agentgym.trainers.batch import Sample, make_microbatches
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.loop import DAPOTrainer
from agentgym.trainers.router_replay import RoutingReplay, flat

MOE = {"n_routed_experts": 8, "num_experts_per_tok": 2}


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def _requests(n: int = 6):
    return [
        GenerationRequest(
            (Message("user", f"question {i % 3} " + "x" * (i % 3)),),  # pairs share a prompt
            SamplingParams(max_tokens=12, temperature=1.0, seed=i),
        )
        for i in range(n)
    ]


def _samples(tok, requests, outs):
    return [
        Sample(
            tuple(encode_prompt(tok, r.messages)),
            tuple(c.token_ids),
            1.0,
            i,
            tuple(c.logprobs),
            c.routing,
        )
        for i, (r, c) in enumerate(zip(requests, outs, strict=True))
    ]


def _router_choices(model, ids, attention, positions):
    """What each router picks on a plain forward (hooks, no replay)."""
    seen = []
    handles = [
        r.register_forward_hook(lambda m, i, o: seen.append(o[2])) for r in moe_routers(model)
    ]
    with torch.no_grad():
        model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=False)
    for h in handles:
        h.remove()
    return seen


def test_the_engine_records_the_experts_of_every_position_it_ran(tok):
    model = build_preset("tiny-deepseek-v3", tok, seed=1, overrides=MOE).eval()
    engine = HFEngine(model, tok, seed=0)
    engine.record_routing = True
    requests = _requests()
    outs = engine.generate(requests)
    layers = len(moe_routers(model))
    for r, c in zip(requests, outs, strict=True):
        prompt = encode_prompt(tok, r.messages)
        assert c.routing.shape == (layers, len(prompt) + len(c.token_ids) - 1, 2)
        assert c.routing.min() >= 0 and c.routing.max() < 8
        # the same choices a plain fp32 forward over prompt + reply makes (same weights)
        ids = torch.tensor([prompt + list(c.token_ids[:-1])])
        own = _router_choices(model, ids, torch.ones_like(ids), torch.arange(ids.shape[1])[None])
        for layer in range(layers):
            assert torch.equal(own[layer].sort(-1).values, c.routing[layer].long().sort(-1).values)
    engine.record_routing = False
    assert engine.generate(requests[:1])[0].routing is None  # off: nothing attached
    assert "routing" not in outs[0].to_dict()  # in memory only


def test_replay_forces_the_recorded_choice_and_keeps_the_gate_gradient(tok):
    model = build_preset("tiny-deepseek-v3", tok, seed=1, overrides=MOE)
    ids = torch.tensor([[5, 6, 7, 8]])
    att, pos = torch.ones_like(ids), torch.arange(4)[None]
    router = moe_routers(model)[0]
    own = _router_choices(model, ids, att, pos)[0]
    forced = (own + 3) % 8  # other experts everywhere (k = 2 distinct, shifted)
    forced[0] = own[0]  # the first position keeps its own choice
    with RoutingReplay(model) as replay:
        replay.set(forced[None].to(torch.int32))
        out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False)
        replay.set(None)
        assert replay.replayed == 4 and replay.changed == 3
        out.logits.sum().backward()
        assert router.weight.grad is not None and router.weight.grad.abs().sum() > 0
        plain = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False)
    assert not torch.allclose(out.logits, plain.logits)  # other experts, other outputs
    unknown = torch.full((1, 4, 2), -1, dtype=torch.int32)  # -1: the router chooses itself
    with RoutingReplay(model) as replay, torch.no_grad():
        replay.set(unknown)
        same = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False)
    assert torch.allclose(same.logits, plain.logits)


def test_replay_narrows_the_mismatch_of_a_bf16_rollout(tok):
    """A bf16 engine and an fp32 learner disagree on some expert choices; replaying the
    engine's choices removes that part of the log-prob gap."""
    model = build_preset("tiny-deepseek-v3", tok, seed=2, overrides=MOE).eval()
    engine = HFEngine(copy.deepcopy(model).to(torch.bfloat16), tok, shares_weights=False, seed=0)
    engine.record_routing = True
    requests = [
        GenerationRequest(
            (Message("user", f"task {i}: " + "abc " * (i % 5)),),
            SamplingParams(max_tokens=24, temperature=1.0, seed=i),
        )
        for i in range(24)
    ]
    mb = make_microbatches(_samples(tok, requests, engine.generate(requests)), 64, 0)[0]
    known = mb.has_sampler_logprobs & (mb.loss_mask > 0)

    def gap(replay_on: bool) -> tuple[float, int]:
        with RoutingReplay(model) as replay, torch.no_grad():
            ids, att, pos = mb.sequences()
            if replay_on:
                replay.set(
                    flat(torch.cat([mb.prompt_routing[:, mb.prompt_of], mb.reply_routing], 2))
                )
            out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False)
            changed = replay.changed
        logp = selected_logprobs(mb.reply_logits(out.logits).float(), mb.targets)
        return float((logp - mb.sampler_logprobs).abs()[known].max()), changed

    without, _ = gap(False)
    with_replay, changed = gap(True)
    assert changed > 0  # bf16 and fp32 routed some tokens differently
    assert with_replay < without


def _cfg(tmp_path, *extra: str) -> TrainConfig:
    return load_config(
        TrainConfig,
        None,
        [*_cfg_args(tmp_path / "run"), "envs=[{id: agentgym-test/EvenChars-v0}]", *extra],
    )


@pytest.mark.parametrize("share_prompts", [True, False])
def test_a_run_with_router_replay_trains_on_the_engines_choices(
    tmp_path, toy_envs_registered, share_prompts
):
    trainer = DAPOTrainer(_cfg(tmp_path, f"algorithm.share_prompts={str(share_prompts).lower()}"))
    history = trainer.train()
    for m in history:
        # every fed position of every trained sample was replayed, in every MoE layer
        assert m["charts/router_replayed"] > 0
        assert 0.0 <= m["charts/router_changed_share"] <= 1.0
        assert m["charts/logprob_mismatch"] < 1e-3  # same weights, same precision


def test_router_replay_is_refused_where_it_cannot_work(tmp_path, toy_envs_registered):
    with pytest.raises(ConfigError, match=r"rollout\.engine=hf"):
        _cfg(tmp_path, "rollout.engine=vllm")
    dense = _cfg(
        tmp_path, "model.preset=tiny-qwen2", f"model.preset_overrides={json.dumps(TINY_QWEN)}"
    )
    with pytest.raises(ConfigError, match="no MoE router"):
        DAPOTrainer(dense)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["fsdp2", "deepspeed"])
def test_router_replay_in_two_processes_matches_one(tmp_path, toy_envs_registered, strategy):
    """FSDP2 and ZeRO-3: the replayed run on two ranks equals the one-process run.

    ZeRO-3 and FSDP2 run every sample's prompt through the model with its reply (no
    shared prompts, see their learners), so the one-process twin does too: then both
    count the same replayed positions."""

    from agentgym.trainers.logging import read_jsonl

    env = "envs=[{id: 'trainer_toy_envs:agentgym-test/EvenChars-v0'}]"
    single = tmp_path / "single"
    unshared = "algorithm.share_prompts=false"
    DAPOTrainer(_cfg(single.parent / "s", env, f"run.output_dir={single}", unshared)).train()
    out = tmp_path / "two"
    args = [
        *(a for a in _cfg_args(out) if not a.startswith("envs=")),
        env,
        f"distributed.strategy={strategy}",
    ]
    train_in_processes(args)
    got, want = read_jsonl(out / "metrics.jsonl"), read_jsonl(single / "metrics.jsonl")
    assert len(got) == len(want) == 2
    for a, b in zip(got, want, strict=True):
        assert a["charts/reward"] == pytest.approx(b["charts/reward"], abs=1e-9)
        assert a["losses/total"] == pytest.approx(b["losses/total"], abs=1e-5)
        assert a["charts/router_replayed"] > 0  # every position replayed once, over both ranks
        assert a["charts/router_replayed"] == b["charts/router_replayed"]


def _cfg_args(out) -> list[str]:
    return [
        f"run.output_dir={out}",
        "run.max_steps=2",
        "run.threads=1",
        "run.progress=false",
        "run.plots=false",
        "model.preset=tiny-deepseek-v3",
        f"model.preset_overrides={json.dumps(MOE)}",
        "rollout.group_size=4",
        "rollout.batch_tasks=2",
        "rollout.max_tokens=8",
        "optim.lr=0.01",
        "algorithm.router_replay=true",
        "algorithm.micro_batch_size=3",
    ]


def test_the_router_replay_benchmark_reports_both_sides():
    from agentgym.benchmarks.perf.router_replay import run

    r = run(quick=True)
    f = r["figures"]
    assert set(r["ratios"]) == {"max_mismatch_reduction_x", "replay_step_time_x"}
    assert 0.0 <= f["changed_share"] <= 1.0 and f["tokens_compared"] > 0
    assert f["mismatch_max_with_replay"] <= f["mismatch_max_without_replay"]
