"""Rollout engines on a GPU: HF ``generate`` vs vLLM, tokens/s and log-prob mismatch.

GPU only (CUDA and the ``vllm`` extra); elsewhere it reports that it was skipped and why,
and exits with status 0. Both engines get the same workload:

* the same tiny model: the ``tiny-qwen2`` preset with ``hidden_size`` 256 (head dim 64,
  a size every vLLM attention backend supports; byte-level tokenizer, random init,
  seed 0) with a LoRA adapter (rank 8 on the attention projections) whose ``lora_B`` is
  perturbed, so the adapter changes the outputs and its compute is on the path;
* the same requests: ``prompts`` short arithmetic prompts, ``G`` samples each, every
  request with its own seed, the same ``max_tokens`` and temperature, all sent as one
  batch (one rollout's worth);
* the same dtype (bfloat16) for both engines; HF generates with the peft model
  (:class:`~agentgym.trainers.engines.HFEngine`), vLLM with the base weights plus the
  adapter loaded as a LoRA adapter (:class:`~agentgym.trainers.engines.VLLMEngine`,
  built by ``make_engine("vllm", ...)``, colocated settings: sleep mode on,
  ``gpu_memory_utilization`` 0.3, CUDA graphs on).

Measured, after one warm-up batch, over ``rounds`` batches: generated tokens per second
(``generate`` wall time only), seconds per batch, mean completion length; for vLLM also
the adapter sync (``load_adapter``: write + switch; vLLM loads it lazily, so the first
batch after a sync carries the load), level-1 sleep and wake times, and engine start-up.
``logprob mismatch`` is mean and max ``|trainer - engine|`` over every sampled token, the
trainer being the same peft model in float32 scoring at the sampling temperature -- the
number the trainer logs as ``charts/logprob_mismatch``. HF's own bf16 mismatch is the
baseline: what bf16 costs without a second engine.

Not measured here: idle share, which needs environments in the loop (the trainer logs
``charts/idle_share`` once ``rollout.engine: vllm`` is selected).

Run: ``python -m agentgym.benchmarks.perf.vllm_engine [--quick]``.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TITLE = "Rollout engines on GPU: HF generate vs vLLM (tokens/s, log-prob mismatch)"


def _settings(quick: bool) -> dict[str, Any]:
    return {
        "prompts": 8 if quick else 32,
        "group_size": 8,
        "max_tokens": 64 if quick else 128,
        "temperature": 1.0,
        "lora_r": 8,
        "rounds": 1 if quick else 3,
        "gpu_memory_utilization": 0.3,
    }


def unavailable() -> str | None:
    """Why this benchmark cannot run here, or ``None`` when it can."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a core dependency
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device (this benchmark needs a GPU)"
    try:
        import vllm  # noqa: F401
    except ImportError:
        return "vLLM is not installed (pip install 'agentgym[vllm]' on a CUDA machine)"
    return None


def _requests(s: dict[str, Any]) -> list[Any]:
    from agentgym import Message, SamplingParams
    from agentgym.trainers.engines import GenerationRequest

    out = []
    for p in range(s["prompts"]):
        msg = (Message("user", f"Compute {17 * p + 3} + {29 * p + 11}. Show your steps."),)
        for g in range(s["group_size"]):
            sampling = SamplingParams(
                max_tokens=s["max_tokens"],
                temperature=s["temperature"],
                seed=1000 * p + g,
            )
            out.append(GenerationRequest(msg, sampling))
    return out


def _time_batches(engine: Any, requests: list[Any], rounds: int) -> dict[str, Any]:
    """Warm up once, then time ``rounds`` generate calls of the whole batch."""
    import torch

    engine.generate(requests)
    seconds, tokens, last = [], 0, []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        last = engine.generate(requests)
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - t0)
        tokens += sum(c.num_tokens or 0 for c in last)
    return {
        "tokens_per_s": tokens / sum(seconds),
        "batch_s": statistics.mean(seconds),
        "mean_tokens": tokens / (rounds * len(requests)),
        "completions": last,
    }


def run(quick: bool = False) -> dict[str, Any]:
    """Time both engines on the same batch (see the module docstring)."""
    quick = quick or os.environ.get("AGENTGYM_PERF_QUICK") == "1"
    why = unavailable()
    if why is not None:
        return {"title": TITLE, "ratios": {}, "figures": {}, "notes": f"Skipped: {why}."}
    import torch

    from agentgym.trainers import (
        LoraSettings,
        adapter_state_dict,
        apply_lora,
        build_preset,
        build_tokenizer,
    )
    from agentgym.trainers.engines import logprob_mismatch, make_engine

    s = _settings(quick)
    tok = build_tokenizer()
    base = build_preset("tiny-qwen2", tok, seed=0, overrides={"hidden_size": 256})
    trainer = apply_lora(base, LoraSettings(r=s["lora_r"]), seed=1)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in trainer.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    trainer = trainer.cuda()  # the float32 scorer, like the learner
    requests = _requests(s)
    temperature = s["temperature"]

    hf_model = copy.deepcopy(trainer).to(torch.bfloat16)
    hf = make_engine("hf", model=hf_model, tokenizer=tok, seed=0)
    hf_out = _time_batches(hf, requests, s["rounds"])
    hf_mm = logprob_mismatch(trainer, tok, requests, hf_out["completions"], temperature=temperature)
    del hf, hf_model
    torch.cuda.empty_cache()

    with tempfile.TemporaryDirectory(prefix="agentgym-bench-vllm-") as tmp:
        t0 = time.perf_counter()
        engine = make_engine(
            "vllm",
            model=trainer,
            tokenizer=tok,
            workdir=Path(tmp),
            options={
                "dtype": "bfloat16",
                "gpu_memory_utilization": s["gpu_memory_utilization"],
                "max_model_len": 1024,
            },
        )
        startup_s = time.perf_counter() - t0
        try:
            vl_out = _time_batches(engine, requests, s["rounds"])
            vl_mm = logprob_mismatch(
                trainer, tok, requests, vl_out["completions"], temperature=temperature
            )
            weights = adapter_state_dict(trainer)
            t0 = time.perf_counter()
            engine.load_adapter(weights)
            sync_s = time.perf_counter() - t0
            engine.sleep()
            engine.wake()
            sleep_s, wake_s = engine.sleep_s, engine.wake_s
        finally:
            engine.close()

    figures: dict[str, Any] = {
        "hf_tokens_per_s": round(hf_out["tokens_per_s"], 1),
        "vllm_tokens_per_s": round(vl_out["tokens_per_s"], 1),
        "hf_batch_s": round(hf_out["batch_s"], 3),
        "vllm_batch_s": round(vl_out["batch_s"], 3),
        "hf_mean_tokens": round(hf_out["mean_tokens"], 1),
        "vllm_mean_tokens": round(vl_out["mean_tokens"], 1),
        "hf_logprob_mismatch_mean": hf_mm["mean_abs"],
        "hf_logprob_mismatch_max": hf_mm["max_abs"],
        "vllm_logprob_mismatch_mean": vl_mm["mean_abs"],
        "vllm_logprob_mismatch_max": vl_mm["max_abs"],
        "vllm_adapter_sync_s": round(sync_s, 4),
        "vllm_sleep_s": round(sleep_s, 3),
        "vllm_wake_s": round(wake_s, 3),
        "vllm_startup_s": round(startup_s, 1),
        "requests_per_batch": len(requests),
        "max_tokens": s["max_tokens"],
        "gpu": torch.cuda.get_device_name(0),
    }
    ratios = {
        "vllm_vs_hf_tokens_per_s_x": round(vl_out["tokens_per_s"] / hf_out["tokens_per_s"], 2)
    }
    notes = (
        f"tiny-qwen2 (hidden 256) + LoRA r={s['lora_r']} (perturbed), bf16, {s['prompts']} prompts x "
        f"G={s['group_size']} = {len(requests)} requests per batch, max_tokens={s['max_tokens']}, "
        f"T={temperature}, 1 warm-up + {s['rounds']} timed batches per engine. Mismatch: "
        "mean/max |trainer (fp32 peft model) - engine| log-prob over all sampled tokens."
    )
    return {"title": TITLE, "ratios": ratios, "figures": figures, "notes": notes}


def _table(figures: dict[str, Any]) -> str:
    rows = [
        ("engine", "tokens/s", "s/batch", "mean tokens", "logprob mismatch mean/max"),
        (
            "hf",
            f"{figures['hf_tokens_per_s']:.0f}",
            f"{figures['hf_batch_s']:.3f}",
            f"{figures['hf_mean_tokens']:.1f}",
            f"{figures['hf_logprob_mismatch_mean']:.4f} / {figures['hf_logprob_mismatch_max']:.4f}",
        ),
        (
            "vllm",
            f"{figures['vllm_tokens_per_s']:.0f}",
            f"{figures['vllm_batch_s']:.3f}",
            f"{figures['vllm_mean_tokens']:.1f}",
            f"{figures['vllm_logprob_mismatch_mean']:.4f} / "
            f"{figures['vllm_logprob_mismatch_max']:.4f}",
        ),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a smaller, faster workload")
    args = p.parse_args(argv)
    out = run(quick=args.quick)
    print(out["title"])
    f = out["figures"]
    if not f:
        print(f"  {out['notes']}")
        return 0
    print(_table(f))
    print(
        f"  vLLM: {out['ratios']['vllm_vs_hf_tokens_per_s_x']:.2f}x HF tokens/s; adapter sync "
        f"{f['vllm_adapter_sync_s']:.4f} s, sleep {f['vllm_sleep_s']:.3f} s, wake "
        f"{f['vllm_wake_s']:.3f} s, start-up {f['vllm_startup_s']:.1f} s on {f['gpu']}"
    )
    print(f"  {out['notes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
