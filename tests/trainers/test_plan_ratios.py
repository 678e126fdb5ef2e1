"""The time model's ratios against measured CPU runs of a tiny model.

Absolute seconds of a CPU run say nothing about an H100, but the model's structure
does transfer: a training step's time grows with its tokens, LoRA skips the weight
gradients of the frozen base (one forward's matrix products fewer), and full activation
checkpointing adds one forward. Each case below times a forward + backward of the tiny
DeepSeek-V3-style MoE (widened to hidden 256 so matrix products, not Python, dominate),
takes the fastest of seven repeats of each setting, alternating between the two (robust
to a loaded machine), and compares the
measured ratio of two settings with the ratio :func:`train_time` predicts for the same
shapes on a "GPU" whose peaks cancel out. No absolute time is asserted; a ratio must
agree within a factor of 2 (what docs/plan.md asks of the published figures).

Observed on a shared 2-core machine (one thread): tokens x4 -> measured 2.9-3.6 /
modelled 4.0; full fine-tune over LoRA (attention adapters) 1.0-1.35 / 1.44 (on CPU the
element-wise work and attention, which LoRA does not shorten, weigh more than on a GPU);
checkpointing on over off 1.36-1.49 / 1.49.
"""

from __future__ import annotations

import copy
import time

import pytest

from agentgym.plan import (
    Architecture,
    Cluster,
    Efficiency,
    GpuSpec,
    LoraSpec,
    ParallelSpec,
    Workload,
)
from agentgym.plan.train_time import train_time

torch = pytest.importorskip("torch")

SEQ = 192
OVERRIDES = {"hidden_size": 256, "moe_intermediate_size": 128, "intermediate_size": 512}
#: a "GPU" for CPU shapes: one peak for every matrix product, no bandwidth limit, no
#: fixed costs, so the model's ratios are ratios of FLOPs
CPU = GpuSpec("cpu", bf16_tflops=0.05, fp8_tflops=None, hbm_tbps=1e3, memory_gb=1, nvlink_gbps=1e3)
EFF = Efficiency(gemm=1.0, train_layer_overhead_us=0.0, moe_imbalance=1.0)


@pytest.fixture(scope="module")
def tiny():
    from agentgym.generation import build_preset, build_tokenizer

    model = build_preset("tiny-deepseek-v3", build_tokenizer(), overrides=OVERRIDES)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield model
    torch.set_num_threads(threads)


def _stepper(model, *, batch: int, checkpointing: bool = False):
    """A forward + backward pass of ``model`` on a fixed batch (one warm-up done)."""
    model.train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    ids = torch.randint(
        3, model.config.vocab_size, (batch, SEQ), generator=torch.Generator().manual_seed(0)
    )

    def step() -> None:
        model(input_ids=ids, labels=ids).loss.backward()
        for p in model.parameters():
            p.grad = None

    step()
    return step


def measured_ratio(a, b, repeats: int = 7) -> float:
    """Fastest time of step ``a`` over fastest time of step ``b``, measured alternately
    (a, b, a, b, ...) so that a change in the machine's load hits both."""
    best_a = best_b = float("inf")
    for _ in range(repeats):
        for step, which in ((a, "a"), (b, "b")):
            start = time.perf_counter()
            step()
            took = time.perf_counter() - start
            if which == "a":
                best_a = min(best_a, took)
            else:
                best_b = min(best_b, took)
    return best_a / best_b


def modelled(model, *, batch: int, lora: LoraSpec | None, checkpointing: bool = False) -> float:
    """The time model's forward + backward seconds for the same shapes."""
    work = Workload(
        episodes=batch,
        group_size=1,
        prompt_tokens=0,
        response_tokens=SEQ,
        max_response_tokens=SEQ,
        distribution="fixed",
        share_prompts=False,
    )
    return train_time(
        Architecture.from_config(model.config),
        work=work,
        lora=lora,
        parallel=ParallelSpec(),
        base_dtype="fp32",
        micro_batch_size=batch,
        checkpointing=checkpointing,
        cluster=Cluster(CPU, 1),
        eff=EFF,
    ).compute


def agrees(measured: float, model: float) -> bool:
    return 0.5 <= measured / model <= 2.0


def test_step_time_grows_with_tokens_as_modelled(tiny) -> None:
    measured = measured_ratio(_stepper(tiny, batch=4), _stepper(tiny, batch=1))
    model = modelled(tiny, batch=4, lora=None) / modelled(tiny, batch=1, lora=None)
    assert model == pytest.approx(4.0)
    assert measured > 1.5 and agrees(measured, model), (measured, model)


def test_lora_over_full_finetune_as_modelled(tiny) -> None:
    from agentgym.trainers.config import LoraSettings
    from agentgym.trainers.models import apply_lora

    # attention adapters only: peft's fused-expert LoRA materialises W + BA, which the
    # model (an unmerged grouped GEMM) does not count
    peft = apply_lora(copy.deepcopy(tiny), LoraSettings(r=8, target_experts=False))
    measured = measured_ratio(_stepper(tiny, batch=4), _stepper(peft, batch=4))
    lora = LoraSpec(r=8, target_experts=False)
    model = modelled(tiny, batch=4, lora=None) / modelled(tiny, batch=4, lora=lora)
    assert 1.2 < model < 1.6
    assert agrees(measured, model), (measured, model)


def test_checkpointing_costs_a_forward_as_modelled(tiny) -> None:
    from agentgym.trainers.config import LoraSettings
    from agentgym.trainers.models import apply_lora

    plain = apply_lora(copy.deepcopy(tiny), LoraSettings(r=8))
    ckpt = apply_lora(copy.deepcopy(tiny), LoraSettings(r=8))
    measured = measured_ratio(_stepper(ckpt, batch=4, checkpointing=True), _stepper(plain, batch=4))
    lora = LoraSpec(r=8)
    model = modelled(tiny, batch=4, lora=lora, checkpointing=True) / modelled(
        tiny, batch=4, lora=lora
    )
    assert 1.3 < model < 1.6
    assert measured > 1.05 and agrees(measured, model), (measured, model)
