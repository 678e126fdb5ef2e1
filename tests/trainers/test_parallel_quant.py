"""LoRA on a quantized frozen base (torchao weight-only int8 / fp8, ``model.quantize``).

* LoRA on the quantized base computes exactly LoRA on a full-precision base holding the
  dequantized weights: logits, every LoRA gradient (the routed experts' included), and
  the reference policy (the adapter switched off);
* the weights shrink, and the log-probs stay close to the unquantized base's;
* ``agentgym train`` with ``model.quantize=int8`` trains the adapter on a quantized base;
* what cannot run is refused at config time.
"""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch
from installed import require

from agentgym import ConfigError, load_config
from agentgym.generation import build_preset, build_tokenizer
from agentgym.trainers import LoraSettings, apply_lora
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.logging import read_jsonl
from agentgym.trainers.loop import DAPOTrainer
from agentgym.trainers.parallel import quantization_error, quantize_base
from agentgym.trainers.parallel.quant import is_quantized

require("torchao", reason="model.quantize needs torchao: pip install -e '.[quant]'")


def _lora_model(preset: str) -> torch.nn.Module:
    model = build_preset(preset, build_tokenizer(), seed=0)
    model = apply_lora(model, LoraSettings(r=4, alpha=8), seed=1)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():  # B away from zero, so that the adapter acts
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return model


@pytest.mark.parametrize("kind", ["int8", "fp8"])
def test_lora_on_the_quantized_base_is_lora_on_its_dequantized_weights(kind):
    model = _lora_model("tiny-deepseek-v3")
    dense = copy.deepcopy(model)
    report = quantize_base(model, kind)
    quantized = {n: p for n, p in model.named_parameters() if is_quantized(p)}
    assert report.tensors == len(quantized) > 0
    assert any(".experts." in n and n.endswith("gate_up_proj") for n in quantized)  # stacks too
    assert not any("lora_" in n or "embed" in n or "lm_head" in n for n in quantized)
    with torch.no_grad():
        for n, p in dense.named_parameters():
            if n in quantized:
                p.copy_(quantized[n].data.dequantize())
    ids = torch.randint(3, 200, (2, 12), generator=torch.Generator().manual_seed(0))
    model.train()
    dense.train()
    a, b = model(input_ids=ids).logits, dense(input_ids=ids).logits
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    a.square().mean().backward()
    b.square().mean().backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    want = {n: p.grad for n, p in dense.named_parameters() if p.requires_grad}
    assert grads.keys() == want.keys()
    expert_grads = [n for n in grads if "experts" in n]
    assert expert_grads and all(grads[n].abs().sum() > 0 for n in expert_grads)
    for n in grads:
        torch.testing.assert_close(grads[n], want[n], atol=1e-6, rtol=1e-4, msg=n)
    with torch.no_grad(), model.disable_adapter(), dense.disable_adapter():  # the reference
        off = model(input_ids=ids).logits
        torch.testing.assert_close(off, dense(input_ids=ids).logits, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(off, a)  # and switching the adapter off changed the output


@pytest.mark.parametrize("kind", ["int8", "fp8"])
@pytest.mark.parametrize("preset", ["tiny-qwen2", "tiny-deepseek-v3"])
def test_quantized_weights_are_smaller_and_log_probs_stay_close(preset, kind):
    model = _lora_model(preset)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids = torch.randint(3, 200, (4, 32), generator=torch.Generator().manual_seed(1))
    got = quantization_error(model, kind, ids)
    # one byte per weight plus a float32 scale per row: under a third of float32's bytes
    assert got["quantized_mib"] < 0.3 * got["base_mib"]
    for where in ("adapter_off", "adapter_on"):
        assert 0 < got[f"logprob_diff_mean_{where}"] < 0.05
        assert got[f"logprob_diff_max_{where}"] < 0.25
    after = dict(model.named_parameters())  # the measured model is left as it was
    assert all(torch.equal(before[n], after[n]) for n in before)


@pytest.mark.slow
def test_train_on_an_int8_base(tmp_path, toy_envs_registered):
    out = tmp_path / "run"
    cfg = load_config(
        TrainConfig,
        None,
        [
            f"run.output_dir={out}",
            "run.max_steps=2",
            "run.save_every=2",
            "run.threads=1",
            "run.progress=false",
            "run.plots=false",
            "envs=[{id: 'trainer_toy_envs:agentgym-test/EvenChars-v0'}]",
            "model.preset=tiny-deepseek-v3",
            "model.quantize=int8",
            "rollout.group_size=4",
            "rollout.batch_tasks=2",
            "rollout.max_tokens=10",
            "optim.lr=0.01",
        ],
    )
    trainer = DAPOTrainer(cfg)
    initial = {k: v.clone() for k, v in trainer.learner.state_dict()["adapter"].items()}
    trainer.train()
    assert any(is_quantized(p) for p in trainer.model.parameters())
    final = trainer.learner.state_dict()["adapter"]
    assert final.keys() == initial.keys()
    moved = [k for k in final if not torch.equal(final[k], initial[k])]
    assert any("experts" in k for k in moved)  # the experts' LoRA trained on int8 experts
    steps = list(read_jsonl(out / "metrics.jsonl"))
    assert len(steps) == 2
    # the engine generated with the same quantized model the learner trains
    assert all(s["charts/logprob_mismatch_max"] < 1e-4 for s in steps)
    assert (out / "checkpoints" / "step_000002" / "adapter" / "adapter_model.safetensors").is_file()


def test_what_a_quantized_base_cannot_run_with_is_refused():
    with pytest.raises(ConfigError, match="none, int8, fp8"):
        load_config(TrainConfig, None, ["model.quantize=int4"])
    with pytest.raises(ConfigError, match=r"lora\.enabled=true"):
        load_config(TrainConfig, None, ["model.quantize=int8", "lora.enabled=false"])
    with pytest.raises(ConfigError, match="device mesh"):
        load_config(TrainConfig, None, ["model.quantize=fp8", "distributed.strategy=fsdp2"])
    for sizes in (["distributed.ep=2"], ["distributed.tp=2"]):  # tp: the experts only
        load_config(
            TrainConfig, None, ["model.quantize=int8", "distributed.strategy=fsdp2", *sizes]
        )


def test_under_tensor_parallelism_only_the_routed_experts_are_quantized():
    model = _lora_model("tiny-deepseek-v3")
    report = quantize_base(model, "int8", dense=False)
    quantized = [n for n, p in model.named_parameters() if is_quantized(p)]
    assert quantized and report.tensors == len(quantized)
    assert all(".experts." in n for n in quantized)  # no attention / MLP / shared expert


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["int8", "fp8"])
def test_lora_on_a_quantized_base_on_cuda_in_bf16(kind):
    """The GPU path: a bf16 base quantized on the GPU, LoRA under bf16 autocast; equal to
    LoRA on the dequantized bf16 base, and the experts' adapters get gradients."""
    model = _lora_model("tiny-deepseek-v3").to("cuda")
    for name, p in model.named_parameters():
        if "lora_" not in name:
            p.data = p.data.to(torch.bfloat16)
    dense = copy.deepcopy(model)
    quantize_base(model, kind)
    quantized = {n: p for n, p in model.named_parameters() if is_quantized(p)}
    with torch.no_grad():
        for n, p in dense.named_parameters():
            if n in quantized:
                p.copy_(quantized[n].data.dequantize())
    ids = torch.randint(3, 200, (2, 12), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        a, b = model(input_ids=ids).logits.float(), dense(input_ids=ids).logits.float()
    torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2)
    a.square().mean().backward()
    grads = [p.grad for n, p in model.named_parameters() if "experts" in n and p.requires_grad]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("autocast", [False, True])
def test_an_expert_on_a_quantized_stack_keeps_its_fp8_view_for_the_backward(autocast):
    """The expert-parallel path's ``x W_e^T`` on a quantized stack gives F.linear's output
    and input gradient on the dequantized weight, and autograd keeps no dequantized copy
    of the weight (the dry run found one bf16 copy per expert at 671B)."""
    from torchao.quantization import Float8WeightOnlyConfig, quantize_

    from agentgym.trainers.parallel.experts import _QuantizedLinear

    lin = torch.nn.Linear(64, 32, bias=False)
    quantize_(lin, Float8WeightOnlyConfig())
    w = lin.weight
    x = torch.randn(5, 64, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    saved: list[torch.Tensor] = []

    def pack(t):
        saved.append(t)
        return t

    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with ctx, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = _QuantizedLinear.apply(x, w)
    with ctx:
        want = torch.nn.functional.linear(x2, w.dequantize())
    torch.testing.assert_close(y, want)
    y.float().square().sum().backward()
    want.float().square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    assert x.grad.dtype == x.dtype
    assert not any(t.shape == (32, 64) for t in saved)  # no dequantized weight kept
