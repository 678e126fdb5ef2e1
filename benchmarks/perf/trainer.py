"""Trainer step time: agentgym's all-sync DAPO vs TRL's ``GRPOTrainer`` (DAPO loss).

The same workload runs through both trainers in one process, **step by step in
alternation** (TRL step 1, agentgym step 1, TRL step 2, ...; agentgym's step runs right
after TRL's on odd steps and right before it on even ones), so that both see the same
machine: on a shared VM other processes' load changes from second to second, and two
back-to-back runs of one trainer then the other measured the load, not the trainers.

What is the same on both sides:

* the model: the ``tiny-qwen2`` preset (random init) with a BPE tokenizer learned from
  the env's text, saved once to a temporary directory and loaded by both, with the same
  LoRA adapter shape (rank 8, alpha 16, on the attention projections, no dropout);
* the prompts: the first observation of ``agentgym/BalancedMath-v0`` (arithmetic,
  level 1) for consecutive seeds, the same prompts in the same order, ``G`` samples per
  prompt, ``prompts_per_step`` prompts per step, all ``G x prompts`` completions of a
  step generated as one batch, ``max_tokens`` new tokens at most, temperature 1, no
  top-p/top-k;
* the reward: the environment's (TRL's reward function resets an env on the task's seed
  and steps it with the completion, as agentgym's rollout does);
* the update: DAPO loss (clip-higher 0.2/0.28, token-level normalisation, no KL), one
  optimizer step per batch (AdamW, lr 1e-4, constant), one micro-batch, gradient-norm
  clipping at 1.0, no activation recomputation (TRL's ``gradient_checkpointing``
  defaults to on, which recomputes the forward pass during the backward pass to save
  memory; agentgym does not recompute, so it is off here -- ``--trl-gradient-
  checkpointing`` restores TRL's default); agentgym's dynamic sampling is off so that
  both generate exactly one round per step;
* the process: agentgym's ``keep_freed_memory`` malloc setting (process-wide, so TRL
  gets it too: without it both are several times slower on VMs with lazily backed
  memory), the same torch thread count, all torch work on the main thread.

What is not the same: each side samples with its own RNG (agentgym per request from
derived seeds, TRL from torch's global RNG), so the completions -- and so their lengths
and rewards -- differ; both are reported (``*_completion_tokens``). Each side runs its own
implementation: agentgym its engine's decode loop (finished rows leave the batch, the
LoRA adapter folded into the weights while generating, the fused decode step) and
learner (a shared prompt computed once, LoRA layers as one matmul); TRL ``generate``
on the peft model and its own loss code, with its defaults for everything not listed
above. A step is timed from TRL's ``on_step_begin`` to ``on_step_end`` callbacks
(generation, reward, loss, backward, optimizer; not the logging after it) and, for
agentgym, around ``DAPOTrainer.train_step`` (rollout with env resets, steps and grading,
reward shaping, update, adapter sync; its metrics included).

Reported: the median seconds per step of each side over the measured steps (after
warm-up steps; means too), ``speedup_vs_trl`` = TRL median / agentgym median, the
median of the per-step ratios of paired steps, agentgym's idle share (bubble seconds /
step seconds over the measured steps: time in a step when the model waited for
environments or rewards), agentgym's generate/train seconds and TRL's generation
seconds (its ``_generate``, tokenisation included). Needs TRL (``pip install -e
'.[bench]'``); without it only agentgym is timed.

``--critic`` measures the critic's cost instead: agentgym's DAPO, PPO and VAPO
(``algorithm.name``) on the same workload, the three stepping in rotation (each step's
order rotates), reporting PPO's and VAPO's median step and update seconds as ratios to
DAPO's. The critic adds a valuation pass over the batch and its own forward and
backward per micro-batch (the policy's passes are unchanged); VAPO adds the NLL term
on correct samples, which reuses the policy's forward.

Run: ``python -m agentgym.benchmarks.perf.trainer [--quick] [--steps N] [--critic]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV_ID = "agentgym/BalancedMath-v0"
ENV_KWARGS: dict[str, Any] = {"kinds": ["arithmetic"], "levels": [1]}


def _settings(quick: bool, measured_steps: int | None = None) -> dict[str, Any]:
    return {
        "group_size": 8,
        "prompts_per_step": 4 if quick else 8,
        "max_tokens": 48 if quick else 96,
        "temperature": 1.0,
        "lr": 1e-4,
        "lora_r": 8,
        "warmup_steps": 1,
        "measured_steps": measured_steps or (3 if quick else 8),
        "threads": int(os.environ.get("AGENTGYM_BENCH_THREADS", "2")),
        "trl_gradient_checkpointing": False,
    }


def _build_model(workdir: Path, env_id: str, env_kwargs: dict[str, Any]) -> Path:
    from agentgym.generation import build_preset, build_tokenizer, save_model
    from agentgym.trainers import EnvSpec, env_corpus

    corpus = env_corpus([EnvSpec(id=env_id, kwargs=env_kwargs)], num_tasks=300)
    tok = build_tokenizer(corpus, vocab_size=512)
    model = build_preset("tiny-qwen2", tok, seed=0)
    return save_model(model, tok, workdir / "model")


class _Agentgym:
    """agentgym's side: a :class:`DAPOTrainer` driven one ``train_step`` at a time."""

    def __init__(
        self,
        model_dir: Path,
        workdir: Path,
        s: dict[str, Any],
        env_id: str,
        env_kwargs: dict[str, Any],
        extra: tuple[str, ...] = (),
        name: str = "agentgym",
    ) -> None:
        from agentgym import load_config
        from agentgym.trainers import DAPOTrainer, TrainConfig

        steps = s["warmup_steps"] + s["measured_steps"]
        cfg = load_config(
            TrainConfig,
            None,
            [
                f"run.output_dir={workdir / name}",
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
                *extra,
            ],
        )
        self.trainer = DAPOTrainer(cfg)
        self.metrics: list[dict[str, Any]] = []
        self.wall: list[float] = []

    def step(self) -> None:
        t0 = time.perf_counter()
        m = self.trainer.train_step()
        self.wall.append(time.perf_counter() - t0)
        self.metrics.append(m)

    def close(self) -> None:
        self.trainer.close()

    def summary(self, warmup: int) -> dict[str, float]:
        m = self.metrics[warmup:]
        step_s = sum(x["time/step_s"] for x in m)
        return {
            "step_s": statistics.median(self.wall[warmup:]),
            "step_s_mean": statistics.mean(self.wall[warmup:]),
            "idle_share": sum(x["time/bubble_s"] for x in m) / step_s if step_s else 0.0,
            "idle_share_median": statistics.median(x["charts/idle_share"] for x in m),
            "generate_s": statistics.median(x["time/generate_s"] for x in m),
            "train_s": statistics.median(x["time/train_s"] for x in m),
            "bubble_s": statistics.median(x["time/bubble_s"] for x in m),
            "completion_tokens": statistics.mean(x["charts/response_tokens_mean"] for x in m),
        }


def _trl_dataset(env: Any, n_prompts: int) -> Any:
    """TRL's dataset: the env's first observation (and seed) of each of ``n_prompts`` tasks."""
    from datasets import Dataset

    rows = []
    for seed in range(n_prompts):
        obs, _ = env.reset(seed=seed)
        rows.append({"prompt": [m.to_dict() for m in obs], "seed": seed})
    return Dataset.from_list(rows)


def _grpo_config(workdir: Path, s: dict[str, Any], steps: int) -> Any:
    """TRL's settings for the shared workload (DAPO loss, one micro-batch, no KL)."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(workdir / "trl"),
        loss_type="dapo",
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        num_generations=s["group_size"],
        per_device_train_batch_size=s["group_size"] * s["prompts_per_step"],
        gradient_accumulation_steps=1,
        num_iterations=1,
        max_completion_length=s["max_tokens"],
        temperature=s["temperature"],
        learning_rate=s["lr"],
        lr_scheduler_type="constant",
        max_grad_norm=1.0,
        # TRL's default recomputes every activation in the backward pass (a memory
        # saver for large models); agentgym does not, so the same work means off
        gradient_checkpointing=s["trl_gradient_checkpointing"],
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


def _trl(
    model_dir: Path,
    workdir: Path,
    s: dict[str, Any],
    env_id: str,
    env_kwargs: dict[str, Any],
    between_steps: Callable[[int, str], None],
) -> dict[str, list[float]]:
    """Train with TRL's GRPOTrainer; ``between_steps(i, "before"|"after")`` runs around
    TRL's step ``i`` (outside its timing). Returns per-step seconds and figures."""
    import gymnasium as gym
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    import agentgym  # noqa: F401  (registers the envs)
    from agentgym import counter_from_tokenizer
    from agentgym.trainers import resolve_lora_targets

    torch.set_num_threads(s["threads"])
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    count = counter_from_tokenizer(tok)
    env = gym.make(env_id, count_tokens=count, **env_kwargs)
    steps = s["warmup_steps"] + s["measured_steps"]
    dataset = _trl_dataset(env, steps * s["prompts_per_step"])

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
    args = _grpo_config(workdir, s, steps)
    out: dict[str, list[float]] = {"step_s": [], "generate_s": [], "completion_tokens": []}

    class _Timer(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            between_steps(len(out["step_s"]), "before")
            self.t0 = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            out["step_s"].append(time.perf_counter() - self.t0)
            between_steps(len(out["step_s"]) - 1, "after")

        def on_log(self, *a: Any, logs: dict[str, Any] | None = None, **k: Any) -> None:
            if logs and "completions/mean_length" in logs:
                out["completion_tokens"].append(float(logs["completions/mean_length"]))

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
    generate = getattr(trainer, "_generate", None)
    if callable(generate):  # time TRL's generation too (a wrapper, same work)

        def timed_generate(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return generate(*a, **k)
            finally:
                out["generate_s"].append(time.perf_counter() - t0)

        trainer._generate = timed_generate  # type: ignore[method-assign]
    trainer.train()
    env.close()
    return out


def run(
    quick: bool = False,
    env_id: str = ENV_ID,
    env_kwargs: dict[str, Any] | None = None,
    measured_steps: int | None = None,
    trl_gradient_checkpointing: bool = False,
) -> dict[str, Any]:
    """Time both trainers on the same workload, step by step in alternation (see the
    module docstring)."""
    quick = quick or os.environ.get("AGENTGYM_PERF_QUICK") == "1"
    env_kwargs = dict(ENV_KWARGS if env_kwargs is None else env_kwargs)
    s = _settings(quick, measured_steps)
    s["trl_gradient_checkpointing"] = trl_gradient_checkpointing
    warm = s["warmup_steps"]
    import torch

    torch.set_num_threads(s["threads"])
    try:
        import trl  # noqa: F401

        have_trl = True
    except ImportError:
        have_trl = False
    with tempfile.TemporaryDirectory(prefix="agentgym-bench-") as tmp:
        work = Path(tmp)
        model_dir = _build_model(work, env_id, env_kwargs)
        ours = _Agentgym(model_dir, work, s, env_id, env_kwargs)
        try:
            theirs = None
            if have_trl:

                def between(i: int, when: str) -> None:
                    if (when == "after") == (i % 2 == 0):
                        ours.step()

                theirs = _trl(model_dir, work, s, env_id, env_kwargs, between)
            else:
                for _ in range(warm + s["measured_steps"]):
                    ours.step()
        finally:
            ours.close()
    a = ours.summary(warm)
    figures: dict[str, Any] = {
        "agentgym_step_s": round(a["step_s"], 3),
        "agentgym_step_s_mean": round(a["step_s_mean"], 3),
        "agentgym_idle_share": round(a["idle_share"], 4),
        "agentgym_idle_share_median": round(a["idle_share_median"], 4),
        "agentgym_generate_s": round(a["generate_s"], 3),
        "agentgym_train_s": round(a["train_s"], 3),
        "agentgym_bubble_s": round(a["bubble_s"], 3),
        "agentgym_completion_tokens": round(a["completion_tokens"], 1),
        "completions_per_step": s["group_size"] * s["prompts_per_step"],
        "max_tokens": s["max_tokens"],
        "threads": s["threads"],
        "measured_steps": s["measured_steps"],
    }
    ratios: dict[str, float] = {}
    if theirs is not None:
        t_steps = theirs["step_s"][warm:]
        t_med = statistics.median(t_steps)
        figures["trl_step_s"] = round(t_med, 3)
        figures["trl_step_s_mean"] = round(statistics.mean(t_steps), 3)
        if len(theirs["generate_s"]) > warm:
            figures["trl_generate_s"] = round(statistics.median(theirs["generate_s"][warm:]), 3)
        if len(theirs["completion_tokens"]) > warm:
            figures["trl_completion_tokens"] = round(
                statistics.mean(theirs["completion_tokens"][warm:]), 1
            )
        ratios["speedup_vs_trl"] = round(t_med / a["step_s"], 2)
        paired = [t / o for t, o in zip(t_steps, ours.wall[warm:], strict=False)]
        ratios["speedup_vs_trl_paired_median"] = round(statistics.median(paired), 2)
    notes = (
        f"{env_id} {env_kwargs}, tiny-qwen2 + LoRA r={s['lora_r']}, G={s['group_size']}, "
        f"{s['prompts_per_step']} prompts/step, max_tokens={s['max_tokens']}, "
        f"{warm} warm-up + {s['measured_steps']} measured steps per side, alternating, "
        f"{s['threads']} torch threads; medians over the measured steps."
    )
    if s["trl_gradient_checkpointing"]:
        notes += " TRL with gradient checkpointing (its default; recomputes activations)."
    if theirs is None:
        notes += " TRL is not installed (pip install -e '.[bench]'): only agentgym was timed."
    return {
        "title": "DAPO trainer step time vs TRL GRPOTrainer",
        "ratios": ratios,
        "figures": figures,
        "notes": notes,
    }


CRITIC_SIDES = {"dapo": (), "ppo": ("algorithm.name=ppo",), "vapo": ("algorithm.name=vapo",)}


def critic_cost(
    quick: bool = False,
    env_id: str = ENV_ID,
    env_kwargs: dict[str, Any] | None = None,
    measured_steps: int | None = None,
) -> dict[str, Any]:
    """PPO's and VAPO's step time against DAPO's on the same workload (see the module
    docstring), the three trainers stepping in rotation."""
    quick = quick or os.environ.get("AGENTGYM_PERF_QUICK") == "1"
    env_kwargs = dict(ENV_KWARGS if env_kwargs is None else env_kwargs)
    s = _settings(quick, measured_steps)
    warm = s["warmup_steps"]
    import torch

    torch.set_num_threads(s["threads"])
    with tempfile.TemporaryDirectory(prefix="agentgym-bench-") as tmp:
        work = Path(tmp)
        model_dir = _build_model(work, env_id, env_kwargs)
        sides = {
            n: _Agentgym(model_dir, work, s, env_id, env_kwargs, extra, name=n)
            for n, extra in CRITIC_SIDES.items()
        }
        try:
            order = list(sides)
            for i in range(warm + s["measured_steps"]):
                for n in order[i % 3 :] + order[: i % 3]:
                    sides[n].step()
        finally:
            for side in sides.values():
                side.close()
    summ = {n: side.summary(warm) for n, side in sides.items()}
    figures: dict[str, Any] = {}
    for n, a in summ.items():
        figures[f"{n}_step_s"] = round(a["step_s"], 3)
        figures[f"{n}_train_s"] = round(a["train_s"], 3)
        figures[f"{n}_generate_s"] = round(a["generate_s"], 3)
    ratios = {}
    for n in ("ppo", "vapo"):
        ratios[f"{n}_vs_dapo_step"] = round(summ[n]["step_s"] / summ["dapo"]["step_s"], 2)
        ratios[f"{n}_vs_dapo_train"] = round(summ[n]["train_s"] / summ["dapo"]["train_s"], 2)
    return {
        "title": "critic cost: PPO and VAPO step time vs DAPO (agentgym)",
        "ratios": ratios,
        "figures": figures,
        "notes": (
            f"{env_id} {env_kwargs}, tiny-qwen2 + LoRA r={s['lora_r']} (critic: its own "
            f"adapter, same rank), G={s['group_size']}, {s['prompts_per_step']} prompts/step, "
            f"max_tokens={s['max_tokens']}, {warm} warm-up + {s['measured_steps']} measured "
            f"steps per side in rotation, {s['threads']} torch threads; medians."
        ),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a smaller, faster workload")
    p.add_argument("--steps", type=int, default=None, help="measured steps per side")
    p.add_argument("--env", default=ENV_ID, help="a single-turn env id")
    p.add_argument(
        "--trl-gradient-checkpointing",
        action="store_true",
        help="TRL with its default gradient checkpointing (extra recomputation)",
    )
    p.add_argument("--critic", action="store_true", help="the critic's cost: PPO and VAPO vs DAPO")
    args = p.parse_args(argv)
    if args.critic:
        out = critic_cost(
            quick=args.quick,
            env_id=args.env,
            env_kwargs=ENV_KWARGS if args.env == ENV_ID else {},
            measured_steps=args.steps,
        )
        print(out["title"])
        for n in CRITIC_SIDES:
            f = out["figures"]
            print(
                f"  {n}: {f[n + '_step_s']:.3f} s/step (generate {f[n + '_generate_s']:.3f}, "
                f"train {f[n + '_train_s']:.3f})"
            )
        print(f"  ratios: {out['ratios']}")
        print(f"  {out['notes']}")
        return 0
    out = run(
        quick=args.quick,
        env_id=args.env,
        env_kwargs=ENV_KWARGS if args.env == ENV_ID else {},
        measured_steps=args.steps,
        trl_gradient_checkpointing=args.trl_gradient_checkpointing,
    )
    f, r = out["figures"], out["ratios"]
    print(out["title"])
    print(
        f"  agentgym: {f['agentgym_step_s']:.3f} s/step (mean {f['agentgym_step_s_mean']:.3f}; "
        f"generate {f['agentgym_generate_s']:.3f}, train {f['agentgym_train_s']:.3f}, "
        f"bubbles {f['agentgym_bubble_s']:.3f}); idle share {f['agentgym_idle_share']:.1%}; "
        f"{f['agentgym_completion_tokens']:.1f} tokens/completion"
    )
    if "trl_step_s" in f:
        gen = f" (generate {f['trl_generate_s']:.3f})" if "trl_generate_s" in f else ""
        toks = (
            f"; {f['trl_completion_tokens']:.1f} tokens/completion"
            if "trl_completion_tokens" in f
            else ""
        )
        print(
            f"  TRL GRPOTrainer (loss_type=dapo): {f['trl_step_s']:.3f} s/step "
            f"(mean {f['trl_step_s_mean']:.3f}){gen}{toks}"
        )
        print(
            f"  speedup: {r['speedup_vs_trl']:.2f}x "
            f"(median of paired steps {r['speedup_vs_trl_paired_median']:.2f}x)"
        )
    print(f"  {out['notes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
