"""The SFT loop: cross-entropy on the reply tokens, AdamW with warm-up and cosine decay.

The loss is cross-entropy on the reply tokens only (plus the end-of-sequence token),
summed and divided by the batch's reply token count. The result is a full Hugging Face
model directory (``<output_dir>/model``, with the tokenizer) that ``agentgym train``
loads with ``model.path``.
"""

from __future__ import annotations

import asyncio
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch

from agentgym import Progress, SamplingParams, derive_seed, save_config
from agentgym.trainers.engines import HFEngine
from agentgym.trainers.evaluation import eval_table, evaluate_async
from agentgym.trainers.logging import JsonlWriter
from agentgym.trainers.models import apply_lora, build_model_and_tokenizer, save_model
from agentgym.trainers.runtime import setup_torch
from agentgym.trainers.sft.config import SFTConfig
from agentgym.trainers.sft.data import Example, collect_examples, example_corpus
from agentgym.trainers.tokenizer import encode_completion, encode_prompt


def build_model_and_examples(cfg: SFTConfig) -> tuple[torch.nn.Module, Any, list[Example]]:
    """The model, its tokenizer, and the SFT examples collected with that tokenizer.

    The examples are collected with the tokenizer's token counter (see
    :func:`collect_examples`). A preset whose tokenizer learns a BPE vocabulary
    (``model.tokenizer_vocab_size``) learns it from a first collection made with the envs'
    default counter, since the tokenizer does not exist yet; the examples are then
    collected again with the learned tokenizer, so where a token budget decides the turns
    (memory summaries) they can differ from those of the first collection.
    """
    model, tok = build_model_and_tokenizer(
        cfg.model, corpus=lambda: example_corpus(collect_examples(cfg))
    )
    return model, tok, collect_examples(cfg, tok)


def _batches(
    encoded: list[tuple[list[int], list[int]]], batch_size: int, rng: random.Random
) -> list[list[int]]:
    order = list(range(len(encoded)))
    rng.shuffle(order)
    return [order[k : k + batch_size] for k in range(0, len(order), batch_size)]


def _collate(
    items: list[tuple[list[int], list[int]]], pad: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(p) + len(r) for p, r in items)
    ids = torch.full((len(items), width), pad, dtype=torch.long)
    att = torch.zeros((len(items), width), dtype=torch.long)
    labels = torch.full((len(items), width), -100, dtype=torch.long)
    for i, (p, r) in enumerate(items):
        seq = p + r
        ids[i, : len(seq)] = torch.tensor(seq)
        att[i, : len(seq)] = 1
        labels[i, len(p) : len(seq)] = torch.tensor(r)
    return ids, att, labels


def run_sft(cfg: SFTConfig) -> dict[str, Any]:
    """Run supervised fine-tuning; returns the final metrics (eval before/after)."""
    setup_torch(cfg.run.threads, cfg.run.seed)
    out = Path(cfg.run.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out / "config.yaml")
    log = JsonlWriter(out / "metrics.jsonl", truncate_after_step=-1)
    t_start = time.monotonic()

    model, tok, examples = build_model_and_examples(cfg)
    if cfg.lora.enabled:
        model = apply_lora(model, cfg.lora, seed=derive_seed("lora", cfg.run.seed))
    encoded = [
        (encode_prompt(tok, msgs), encode_completion(tok, reply)) for msgs, reply in examples
    ]
    too_long = sum(len(r) > cfg.max_tokens for _, r in encoded)
    reply_lens = [len(r) for _, r in encoded]
    print(
        f"[agentgym sft] {len(encoded)} examples, reply tokens mean {sum(reply_lens) / len(reply_lens):.1f} "
        f"max {max(reply_lens)}; vocab {len(tok)}; {sum(p.numel() for p in model.parameters()):,} parameters",
        file=sys.stderr,
    )
    if too_long:
        print(
            f"[agentgym sft] warning: {too_long} replies are longer than max_tokens={cfg.max_tokens}; "
            "at evaluation they will be cut.",
            file=sys.stderr,
        )
    t = cfg.train
    steps_per_epoch = math.ceil(len(encoded) / t.batch_size)
    total_steps = t.max_steps or max(1, int(t.epochs * steps_per_epoch))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=t.lr, weight_decay=t.weight_decay, betas=(0.9, 0.95))

    def lr_at(step: int) -> float:
        if step < t.warmup_steps:
            return t.lr * (step + 1) / t.warmup_steps
        frac = (step - t.warmup_steps) / max(1, total_steps - t.warmup_steps)
        return t.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))

    engine = HFEngine(model, tok, seed=cfg.run.seed)
    policy = engine.as_policy()
    eval_sampling = SamplingParams(
        max_tokens=cfg.max_tokens,
        temperature=cfg.eval.temperature,
        seed=derive_seed("eval", cfg.run.seed),
    )

    def evaluate() -> dict[str, float]:
        m, _ = asyncio.run(
            evaluate_async(
                policy,
                cfg.envs,
                tok,
                num_tasks=cfg.eval.num_tasks,
                seed_start=cfg.eval.seed_start,
                sampling=eval_sampling,
            )
        )
        return m

    results: dict[str, Any] = {}
    if cfg.eval.at_ends:
        results["before"] = evaluate()
        log.write({"step": 0, **results["before"]})
    rng = random.Random(cfg.run.seed)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    progress = Progress(total_steps, desc="sft", enabled=cfg.run.progress)
    step = 0
    model.train()
    while step < total_steps:
        for idx in _batches(encoded, t.batch_size, rng):
            if step >= total_steps:
                break
            ids, att, labels = _collate([encoded[i] for i in idx], pad)
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            logits = (
                model(input_ids=ids, attention_mask=att, use_cache=False).logits[:, :-1].float()
            )
            targets = labels[:, 1:]
            mask = targets != -100
            nll = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]),
                targets.clamp(min=0).reshape(-1),
                reduction="none",
            ).view_as(targets)
            loss = (nll * mask).sum() / mask.sum().clamp(min=1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(
                params, t.max_grad_norm if t.max_grad_norm > 0 else math.inf
            )
            opt.step()
            step += 1
            row = {
                "step": step,
                "losses/sft": float(loss.detach()),
                "losses/grad_norm": float(gn),
                "charts/lr": lr_at(step - 1),
            }
            if cfg.eval.every and step % cfg.eval.every == 0:
                row.update(evaluate())
                model.train()
            log.write(row)
            progress.update(1, {"loss": row["losses/sft"]})
    progress.close()
    if cfg.eval.at_ends:
        results["after"] = evaluate()
        log.write({"step": step, **results["after"]})
    model_dir = out / "model"
    to_save = model.merge_and_unload() if cfg.lora.enabled else model
    save_model(to_save, tok, model_dir)
    policy.close()
    results["model_dir"] = str(model_dir)
    results["seconds"] = time.monotonic() - t_start
    if "before" in results:
        text = eval_table({"step": 0, **results["before"]}, {"step": step, **results["after"]})
        (out / "eval_table.md").write_text(text + "\n", encoding="utf-8")
        print(text)
    print(f"[agentgym sft] model saved to {model_dir} ({results['seconds']:.0f}s)", file=sys.stderr)
    return results
