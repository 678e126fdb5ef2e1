"""Trainer step time: agentgym's all-sync DAPO vs TRL's ``GRPOTrainer`` (DAPO loss).

The same workload runs through both trainers in one process, one after the other:

* the same tiny model (the ``tiny-qwen2`` preset with a BPE tokenizer learned from the
  env's text, saved once to a temporary directory and loaded by both), with the same
  LoRA adapter (rank 8 on the attention projections);
* the same prompts: the first observation of ``agentgym/BalancedMath-v0`` (arithmetic,
  level 1) for consecutive seeds, ``G`` samples per prompt, the same batch of prompts
  per step, the same ``max_tokens`` and temperature;
* the same reward: the environment's (TRL's reward function resets an env on the task's
  seed and steps it with the completion);
* the same loss: DAPO (clip-higher 0.2/0.28, token-level normalisation, no KL), one
  optimizer step per batch. agentgym's dynamic sampling is switched off so that both do
  exactly one generation round per step.

Both run in the same process after agentgym's ``keep_freed_memory`` malloc setting
(process-wide, so TRL gets it too: without it both are several times slower on VMs with
lazily backed memory), with the same torch thread count, all torch work on the main
thread.

Reported: seconds per step for each (mean over the measured steps, after warm-up
steps), ``speedup_vs_trl`` = TRL seconds per step / agentgym seconds per step, and
agentgym's idle share (time in a step when the model waited for environments or
rewards). Needs ``trl`` (``pip install trl``); without it only agentgym is timed.

Run: ``python -m agentgym.benchmarks.perf.trainer [--quick]``.
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

ENV_ID = "agentgym/BalancedMath-v0"
ENV_KWARGS: dict[str, Any] = {"kinds": ["arithmetic"], "levels": [1]}


def _settings(quick: bool) -> dict[str, Any]:
    return {
        "group_size": 8,
        "prompts_per_step": 4 if quick else 8,
        "max_tokens": 48 if quick else 96,
        "temperature": 1.0,
        "lr": 1e-4,
        "lora_r": 8,
        "warmup_steps": 1,
        "measured_steps": 2 if quick else 4,
        "threads": int(os.environ.get("AGENTGYM_BENCH_THREADS", "2")),
    }


def _build_model(workdir: Path, env_id: str, env_kwargs: dict[str, Any]) -> Path:
    from agentgym.trainers.common import env_corpus
    from agentgym.trainers.config import EnvSpec
    from agentgym.trainers.models import build_preset, save_model
    from agentgym.trainers.tokenizer import build_tokenizer

    corpus = env_corpus([EnvSpec(id=env_id, kwargs=env_kwargs)], num_tasks=300)
    tok = build_tokenizer(corpus, vocab_size=512)
    model = build_preset("tiny-qwen2", tok, seed=0)
    return save_model(model, tok, workdir / "model")


def _agentgym(
    model_dir: Path, workdir: Path, s: dict[str, Any], env_id: str, env_kwargs: dict[str, Any]
) -> dict[str, float]:
    from agentgym.trainers.config import TrainConfig, load_config
    from agentgym.trainers.loop import DAPOTrainer

    steps = s["warmup_steps"] + s["measured_steps"]
    cfg = load_config(
        TrainConfig,
        None,
        [
            f"run.output_dir={workdir / 'agentgym'}",
            f"run.max_steps={steps}",
            "run.save_every=0",
            "run.progress=false",
            "run.plots=false",
            f"run.threads={s['threads']}",
            f"model.path={model_dir}",
            f"envs=[{{id: {env_id}, kwargs: {env_kwargs!r}}}]".replace("'", '"'),
            f"rollout.group_size={s['group_size']}",
            f"rollout.batch_tasks={s['prompts_per_step']}",
            f"rollout.max_tokens={s['max_tokens']}",
            f"rollout.temperature={s['temperature']}",
            f"lora.r={s['lora_r']}",
            f"lora.alpha={2 * s['lora_r']}",
            "algorithm.dynamic_sampling=false",
            f"algorithm.micro_batch_size={s['group_size'] * s['prompts_per_step']}",
            f"optim.lr={s['lr']}",
        ],
    )
    trainer = DAPOTrainer(cfg)
    # the last checkpoint is not part of a step; keep it out of the timing
    trainer.cfg.run.save_every = 0
    history = trainer.train()
    measured = history[s["warmup_steps"] :]
    step_s = [m["time/step_s"] for m in measured]
    return {
        "step_s": statistics.mean(step_s),
        "idle_share": statistics.mean(m["charts/idle_share"] for m in measured),
        "generate_s": statistics.mean(m["time/generate_s"] for m in measured),
        "train_s": statistics.mean(m["time/train_s"] for m in measured),
        "tokens_per_step": statistics.mean(m["charts/train_tokens"] for m in measured),
    }


def _trl(
    model_dir: Path, workdir: Path, s: dict[str, Any], env_id: str, env_kwargs: dict[str, Any]
) -> dict[str, float]:
    import gymnasium as gym
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import agentgym  # noqa: F401  (registers the envs)
    from agentgym.tokens import counter_from_tokenizer
    from agentgym.trainers.models import resolve_lora_targets

    torch.set_num_threads(s["threads"])
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    count = counter_from_tokenizer(tok)
    env = gym.make(env_id, count_tokens=count, **env_kwargs)
    steps = s["warmup_steps"] + s["measured_steps"]
    n_prompts = steps * s["prompts_per_step"]
    rows = []
    for seed in range(n_prompts):
        obs, _ = env.reset(seed=seed)
        rows.append({"prompt": [m.to_dict() for m in obs], "seed": seed})
    dataset = Dataset.from_list(rows)

    def env_reward(completions: list[Any], seed: list[int], **_: Any) -> list[float]:
        out = []
        for completion, sd in zip(completions, seed, strict=True):
            text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
            env.reset(seed=int(sd))
            _, r, _, _, _ = env.step(text)
            out.append(float(r))
        return out

    targets = resolve_lora_targets(model, None, False)
    leaves = sorted({n.split(".")[-1] for n in targets.modules})
    batch = s["group_size"] * s["prompts_per_step"]
    args = GRPOConfig(
        output_dir=str(workdir / "trl"),
        loss_type="dapo",
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        num_generations=s["group_size"],
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_iterations=1,
        max_completion_length=s["max_tokens"],
        temperature=s["temperature"],
        learning_rate=s["lr"],
        lr_scheduler_type="constant",
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        dataloader_num_workers=0,
        shuffle_dataset=False,
        seed=0,
        disable_tqdm=True,
    )
    times: list[float] = []

    class _Timer(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self.t0 = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            times.append(time.perf_counter() - self.t0)

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[env_reward],
        args=args,
        train_dataset=dataset,
        processing_class=tok,
        peft_config=LoraConfig(
            r=s["lora_r"], lora_alpha=2 * s["lora_r"], target_modules=leaves, lora_dropout=0.0
        ),
        callbacks=[_Timer()],
    )
    trainer.train()
    env.close()
    measured = times[s["warmup_steps"] :]
    return {"step_s": statistics.mean(measured)}


def run(
    quick: bool = False, env_id: str = ENV_ID, env_kwargs: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Time both trainers on the same workload (see the module docstring)."""
    quick = quick or os.environ.get("AGENTGYM_PERF_QUICK") == "1"
    env_kwargs = dict(ENV_KWARGS if env_kwargs is None else env_kwargs)
    s = _settings(quick)
    import torch

    torch.set_num_threads(s["threads"])
    with tempfile.TemporaryDirectory(prefix="agentgym-bench-") as tmp:
        work = Path(tmp)
        model_dir = _build_model(work, env_id, env_kwargs)
        ours = _agentgym(model_dir, work, s, env_id, env_kwargs)
        try:
            import trl  # noqa: F401

            have_trl = True
        except ImportError:
            have_trl = False
        theirs = _trl(model_dir, work, s, env_id, env_kwargs) if have_trl else None
    figures: dict[str, Any] = {
        "agentgym_step_s": round(ours["step_s"], 3),
        "agentgym_idle_share": round(ours["idle_share"], 4),
        "agentgym_generate_s": round(ours["generate_s"], 3),
        "agentgym_train_s": round(ours["train_s"], 3),
        "completions_per_step": s["group_size"] * s["prompts_per_step"],
        "max_tokens": s["max_tokens"],
        "threads": s["threads"],
    }
    ratios: dict[str, float] = {}
    if theirs is not None:
        figures["trl_step_s"] = round(theirs["step_s"], 3)
        ratios["speedup_vs_trl"] = round(theirs["step_s"] / ours["step_s"], 2)
    notes = (
        f"{env_id} {env_kwargs}, tiny-qwen2 + LoRA r={s['lora_r']}, G={s['group_size']}, "
        f"{s['prompts_per_step']} prompts/step, max_tokens={s['max_tokens']}, "
        f"{s['warmup_steps']} warm-up + {s['measured_steps']} measured steps, {s['threads']} torch threads."
    )
    if theirs is None:
        notes += " TRL is not installed (pip install trl): only agentgym was timed."
    return {
        "title": "DAPO trainer step time vs TRL GRPOTrainer",
        "ratios": ratios,
        "figures": figures,
        "notes": notes,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a smaller, faster workload")
    p.add_argument("--env", default=ENV_ID, help="a single-turn env id")
    args = p.parse_args(argv)
    out = run(
        quick=args.quick, env_id=args.env, env_kwargs=ENV_KWARGS if args.env == ENV_ID else {}
    )
    f = out["figures"]
    print(out["title"])
    print(
        f"  agentgym: {f['agentgym_step_s']:.3f} s/step (idle share {f['agentgym_idle_share']:.1%})"
    )
    if "trl_step_s" in f:
        print(f"  TRL GRPOTrainer (loss_type=dapo): {f['trl_step_s']:.3f} s/step")
        print(f"  speedup: {out['ratios']['speedup_vs_trl']:.2f}x")
    print(f"  {out['notes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
