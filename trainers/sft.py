"""Supervised warm start on worked solutions (or oracle turns) offered by the envs.

Examples come from the environments themselves, reached by id: for each training seed
the env is reset and asked for a worked solution of that task
(``env.unwrapped.worked_solution(**data.solution_kwargs)``), which becomes the reply to
the first observation; or the env's oracle policy is played and every one of its turns
(memory summaries included) becomes an example. The envs are made with the model
tokenizer's exact token counter (``count_tokens``), as ``agentgym train`` and evaluation
make them, so token-driven behaviour (budget-triggered memory summaries, memories cut to
``summary_max_tokens``) is the same in the SFT data as at training and evaluation time.
The loss is cross-entropy on the reply tokens only (plus the end-of-sequence token),
summed and divided by the batch's reply token count.

The result is a full Hugging Face model directory (``<output_dir>/model``, with the
tokenizer) that ``agentgym train`` loads with ``model.path``.
"""

from __future__ import annotations

import asyncio
import math
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from agentgym import ConfigError, Message, SamplingParams, derive_seed, save_config
from agentgym.trainers.common import (
    build_model_and_tokenizer,
    env_kwargs,
    evaluate_async,
    resolve_envs,
    setup_torch,
)
from agentgym.trainers.config import SFTConfig
from agentgym.trainers.logging import JsonlWriter, Progress
from agentgym.trainers.tokenizer import encode_completion, encode_prompt

Example = tuple[tuple[Message, ...], str]


def collect_examples(cfg: SFTConfig, tokenizer: Any | None = None) -> list[Example]:
    """(prompt messages, reply) pairs from the configured envs' seeds.

    Args:
        cfg: the SFT config (``envs`` and ``data``).
        tokenizer: the model's tokenizer. Every env is then made with
            :func:`~agentgym.trainers.common.env_kwargs` (the tokenizer's exact
            ``count_tokens``), as DAPO training and evaluation make it. ``None``: the
            envs' own default counter (bytes/4); only for the text a preset's tokenizer
            learns its vocabulary from, before that tokenizer exists.
    """
    ids = resolve_envs(cfg.envs)
    weights = [e.weight for e in cfg.envs]
    counts = [max(1, round(cfg.data.num_tasks * w / sum(weights))) for w in weights]
    examples: list[Example] = []
    seed = cfg.data.seed_start
    for env_id, spec, n in zip(ids, cfg.envs, counts, strict=True):
        seeds = list(range(seed, seed + n))
        seed += n
        kwargs = dict(spec.kwargs) if tokenizer is None else env_kwargs(spec, tokenizer)
        if cfg.data.source == "worked_solution":
            examples.extend(
                _worked_solutions(
                    env_id, kwargs, seeds, cfg.data.solution_kwargs, cfg.data.line_dropout
                )
            )
        else:
            examples.extend(_oracle_turns(env_id, kwargs, seeds))
    return examples


def example_corpus(examples: Sequence[Example]) -> list[str]:
    """Every text of ``examples``: the prompt messages' contents, then the replies."""
    return [m.content for msgs, _ in examples for m in msgs] + [r for _, r in examples]


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


def drop_lines(text: str, p: float, rng: random.Random) -> str:
    """``text`` with each line but the last removed with probability ``p``."""
    lines = text.split("\n")
    if p <= 0 or len(lines) < 2:
        return text
    kept = [line for line in lines[:-1] if rng.random() >= p]
    return "\n".join([*kept, lines[-1]])


def _worked_solutions(
    env_id: str,
    kwargs: dict[str, Any],
    seeds: Sequence[int],
    sol_kwargs: dict[str, Any],
    line_dropout: float = 0.0,
) -> list[Example]:
    """One (first observation, worked solution) pair per seed; ``kwargs`` go to ``gym.make``."""
    env = gym.make(env_id, **kwargs)
    try:
        fn = getattr(env.unwrapped, "worked_solution", None)
        if not callable(fn):
            raise ConfigError(
                f"{env_id} offers no worked solutions (env.unwrapped.worked_solution); use "
                "data.source=oracle if it has an oracle."
            )
        out = []
        for s in seeds:
            obs, _ = env.reset(seed=s)
            try:
                text = fn(**sol_kwargs)
            except TypeError as e:
                raise ConfigError(f"{env_id}.worked_solution(**{sol_kwargs}): {e}") from e
            text = drop_lines(
                str(text), line_dropout, random.Random(derive_seed("line_dropout", s))
            )
            out.append((tuple(obs), text))
        return out
    finally:
        env.close()


def _oracle_turns(env_id: str, kwargs: dict[str, Any], seeds: Sequence[int]) -> list[Example]:
    """Every turn (memory summaries included) of the oracle's episodes, one per seed."""
    from agentgym import OraclePolicy, rollout

    episodes = rollout(env_id, OraclePolicy(), seeds=seeds, env_kwargs=kwargs, concurrency=8)
    return [(t.messages, t.completion.text) for ep in episodes for t in ep.turns]


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
        from agentgym.trainers.models import apply_lora

        model = apply_lora(
            model,
            r=cfg.lora.r,
            alpha=cfg.lora.alpha,
            dropout=cfg.lora.dropout,
            target_modules=cfg.lora.target_modules,
            target_experts=cfg.lora.target_experts,
            seed=derive_seed("lora", cfg.run.seed),
        )
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

    from agentgym.trainers.engines.hf import HFEngine

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
    progress = Progress(total_steps, enabled=cfg.run.progress, desc="sft")
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
            progress.update(step, {"losses/sft": row["losses/sft"]})
    progress.close()
    if cfg.eval.at_ends:
        results["after"] = evaluate()
        log.write({"step": step, **results["after"]})
    model_dir = out / "model"
    to_save = model.merge_and_unload() if cfg.lora.enabled else model
    from agentgym.trainers.models import save_model

    save_model(to_save, tok, model_dir)
    policy.close()
    results["model_dir"] = str(model_dir)
    results["seconds"] = time.monotonic() - t_start
    if "before" in results:
        from agentgym.trainers.loop import eval_table

        text = eval_table({"step": 0, **results["before"]}, {"step": step, **results["after"]})
        (out / "eval_table.md").write_text(text + "\n", encoding="utf-8")
        print(text)
    print(f"[agentgym sft] model saved to {model_dir} ({results['seconds']:.0f}s)", file=sys.stderr)
    return results
