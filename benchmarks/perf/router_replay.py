"""MoE router replay: the rollout/learner log-prob gap with and without it, and its cost.

The rollout runs in bf16 (a copy of the model, as a separate inference engine would),
the learner in fp32: near-tied router scores then pick other experts in the two, which
is the mismatch router replay removes. On a tiny DeepSeek-V3-style MoE (16 routed
experts, top-4; built in process), replies to a batch of prompts are sampled by the bf16
engine with its routing recorded; the fp32 learner computes the log-probs of the same
tokens twice, with its own routing and replaying the engine's. Reported:

* ``mismatch_*``: mean / max absolute log-prob difference to the engine's, and the k3
  KL estimate, with and without replay;
* ``changed_share``: the share of (token, MoE layer) choices where the learner's router
  would have picked another expert set;
* ``replay_step_time_x``: a learner forward + backward with replay / without (the cost).
"""

from __future__ import annotations

import copy
import os
import time
from typing import Any

MOE = {"n_routed_experts": 16, "num_experts_per_tok": 4}


def _settings(quick: bool) -> dict[str, int]:
    return {
        "requests": 16 if quick else 64,
        "max_tokens": 24 if quick else 48,
        "repeats": 2 if quick else 5,
    }


def run(quick: bool = False) -> dict[str, Any]:
    import torch

    from agentgym import Message, SamplingParams
    from agentgym.generation import (
        GenerationRequest,
        HFEngine,
        build_preset,
        build_tokenizer,
        encode_prompt,
    )
    from agentgym.trainers import RoutingReplay, Sample, flat, make_microbatches
    from agentgym.trainers.algorithm import mismatch_stats, selected_logprobs

    s = _settings(quick or bool(os.environ.get("AGENTGYM_PERF_QUICK")))
    torch.manual_seed(0)
    tok = build_tokenizer()
    model = build_preset("tiny-deepseek-v3", tok, seed=7, overrides=MOE)
    engine = HFEngine(copy.deepcopy(model).to(torch.bfloat16), tok, shares_weights=False, seed=0)
    engine.record_routing = True
    requests = [
        GenerationRequest(
            (Message("user", f"problem {i}: " + "xyz " * (i % 7)),),
            SamplingParams(max_tokens=s["max_tokens"], temperature=1.0, seed=i),
        )
        for i in range(s["requests"])
    ]
    outs = engine.generate(requests)
    samples = [
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
    mb = make_microbatches(samples, len(samples), 0)[0]
    known = mb.has_sampler_logprobs & (mb.loss_mask > 0)
    routing = flat(torch.cat([mb.prompt_routing[:, mb.prompt_of], mb.reply_routing], 2))
    ids, att, pos = mb.sequences()

    def forward(replay: RoutingReplay, on: bool, grad: bool) -> Any:
        replay.set(routing if on else None)
        try:
            with torch.set_grad_enabled(grad):
                out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False)
        finally:
            replay.set(None)
        return selected_logprobs(mb.reply_logits(out.logits).float(), mb.targets)

    figures: dict[str, Any] = {}
    with RoutingReplay(model) as replay:
        for name, on in (("without_replay", False), ("with_replay", True)):
            replay.replayed = replay.changed = 0
            gap = mismatch_stats(forward(replay, on, False), mb.sampler_logprobs, known)
            n = float(gap["tokens"])
            figures[f"mismatch_mean_{name}"] = float(gap["abs_sum"]) / n
            figures[f"mismatch_max_{name}"] = float(gap["abs_max"])
            figures[f"mismatch_k3_{name}"] = float(gap["k3_sum"]) / n
            if on:
                figures["changed_share"] = replay.changed / max(replay.replayed, 1)
        times: dict[bool, float] = {}
        for _ in range(s["repeats"]):  # interleaved, best of n: a fair ratio on a busy machine
            for on in (False, True):
                model.zero_grad(set_to_none=True)
                t0 = time.perf_counter()
                forward(replay, on, True).sum().backward()
                dt = time.perf_counter() - t0
                times[on] = min(times.get(on, dt), dt)
    figures["learner_step_ms_without_replay"] = 1e3 * times[False]
    figures["learner_step_ms_with_replay"] = 1e3 * times[True]
    figures["tokens_compared"] = int(known.sum())
    return {
        "title": "MoE router replay: bf16 rollout vs fp32 learner",
        "ratios": {
            "max_mismatch_reduction_x": figures["mismatch_max_without_replay"]
            / max(figures["mismatch_max_with_replay"], 1e-12),
            "replay_step_time_x": times[True] / times[False],
        },
        "figures": figures,
        "notes": (
            f"tiny-deepseek-v3 with {MOE['n_routed_experts']} routed experts, top-"
            f"{MOE['num_experts_per_tok']}; {s['requests']} replies of up to {s['max_tokens']} "
            "tokens sampled by a bf16 copy; fp32 learner."
        ),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=1))
