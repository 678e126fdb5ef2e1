"""The long-tail bubble: all-sync DAPO and PPO vs T-PPO on replies of heavy-tailed length.

All-sync training waits, every step, for the longest reply of the batch: with reply
lengths from a heavy-tailed law most rows finish early and the engine decodes a
shrinking batch for most of the rollout. T-PPO (``rollout.truncate_window``) keeps a
pool of responses in flight and extends each by at most a window of tokens per step, so
every step decodes a full batch for a bounded number of tokens.

The workload: ``agentgym/LongTail-v0`` (a reply of ``k`` letters, ``k`` from a discrete
Pareto law: median 7, mean ~17, a few near the cap). A random-init model does not write
replies of such lengths, so the benchmark first gives the tiny model a supervised warm
start on the env's oracle replies (``agentgym sft`` in process, ``data.source=oracle``):
afterwards the lengths of its sampled replies follow the law roughly, and the
benchmark reports the lengths it actually produced.

Three trainers on the same warm start, same batch (``G x tasks`` episodes in flight),
same LoRA and learning rate, stepping **in rotation** (each step's order rotates, so
that a shared machine's load falls on all of them alike):

* ``dapo``: all-sync DAPO (group advantages, no critic), no dynamic sampling;
* ``ppo``: all-sync with T-PPO's algorithm (the ``dapo`` loss, GAE from a critic with
  ``lam_critic = 1``) but no window: what T-PPO changes, and only that;
* ``tppo``: ``algorithm.name=tppo`` with ``rollout.truncate_window = window``.

Reported per side, over the measured steps: median step seconds, trained tokens per
second (policy tokens in the update / wall seconds of the steps), decode utilization
(tokens decoded / decode steps x rows each ``generate`` call started with, pooled over
the steps), tail share (seconds decoding with fewer than half the rows still generating
/ rollout seconds), mean reward (T-PPO: of the episodes that ended in the step); the
ratios ``tppo`` / ``dapo`` and ``tppo`` / ``ppo`` of trained tokens per second.

What this does not show: the reward per trained token over a long run (a few steps of
a tiny model are measured here; ``configs/tppo_longtail.yaml`` is the run to compare).

With ``--engine vllm`` the three trainers roll out with vLLM (T-PPO's continuations go
through vLLM's prefix requests): there decode rather than the update may dominate a step.

Run: ``python -m agentgym.benchmarks.perf.longtail [--quick] [--steps N] [--window W]
[--warm-start DIR] [--engine hf|vllm]`` (``DIR`` keeps the warm start for the next run
with the same settings).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ENV_ID = "agentgym/LongTail-v0"
#: the tiny-qwen2 preset made smaller (91K parameters): the warm start fits in minutes
MODEL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}


#: ``--engine vllm`` on vLLM's CPU build: float32 like the trainer, eager, a small KV cache
VLLM_CPU_OPTIONS = {"enforce_eager": True, "kv_cache_memory_bytes": 128 * 2**20}


def _settings(
    quick: bool, measured_steps: int | None, window: int | None, engine: str = "hf"
) -> dict[str, Any]:
    max_length = 96 if quick else 128
    return {
        "engine": engine,
        "max_length": max_length,  # letters; the BPE packs a few letters per token
        "max_tokens": 96 if quick else 128,
        "group_size": 8,
        "tasks": 4 if quick else 8,
        "window": window or (32 if quick else 43),  # T-PPO's: a third of the cap
        "sft_steps": 60 if quick else 120,
        "warmup_steps": 1,
        "measured_steps": measured_steps or (4 if quick else 8),
        "threads": int(os.environ.get("AGENTGYM_BENCH_THREADS", "2")),
        "lr": 1e-4,
    }


def warm_start(work: Path, s: dict[str, Any]) -> Path:
    """A tiny model fitted to LongTail's oracle replies (so its reply lengths are
    heavy-tailed); returns its directory."""
    from agentgym import load_config
    from agentgym.trainers import SFTConfig, run_sft

    cfg = load_config(
        SFTConfig,
        None,
        [
            f"run.output_dir={work / 'sft'}",
            f"run.threads={s['threads']}",
            "run.progress=false",
            "model.preset=tiny-qwen2",
            f"model.preset_overrides={json.dumps(MODEL)}",
            "model.tokenizer_vocab_size=262",  # no merges: one letter, one token
            f"envs=[{{id: {ENV_ID}, kwargs: {{max_length: {s['max_length']}}}}}]",
            "data.source=oracle",
            "data.num_tasks=1000",
            f"train.max_steps={s['sft_steps']}",
            "train.batch_size=32",
            "train.lr=3e-3",
            "train.warmup_steps=10",
            "train.length_groups=4",
            "eval.at_ends=false",
            f"max_tokens={s['max_tokens']}",
        ],
    )
    run_sft(cfg)
    return work / "sft" / "model"


SIDES: dict[str, tuple[str, ...]] = {
    "dapo": ("algorithm.name=dapo", "algorithm.dynamic_sampling=false"),
    "ppo": (
        "algorithm.advantage=gae",
        "algorithm.lam_critic=1.0",
        "algorithm.dynamic_sampling=false",
    ),
    "tppo": ("algorithm.name=tppo",),
}


class _Side:
    """One trainer driven a ``train_step`` at a time."""

    def __init__(self, name: str, model: Path, work: Path, s: dict[str, Any]) -> None:
        from agentgym import load_config
        from agentgym.trainers import DAPOTrainer, TrainConfig

        extra = list(SIDES[name])
        if name == "tppo":
            extra.append(f"rollout.truncate_window={s['window']}")
        n = s["group_size"] * s["tasks"]
        extra.append(f"rollout.engine={s['engine']}")
        if s["engine"] == "vllm":
            import torch

            if not torch.cuda.is_available():
                extra.append(f"rollout.engine_options={json.dumps(VLLM_CPU_OPTIONS)}")
        cfg = load_config(
            TrainConfig,
            None,
            [
                f"run.output_dir={work / name}",
                f"run.max_steps={s['warmup_steps'] + s['measured_steps']}",
                "run.save_every=0",
                "run.progress=false",
                "run.plots=false",
                f"run.threads={s['threads']}",
                "health.enabled=false",
                f"model.path={model}",
                f"envs=[{{id: {ENV_ID}, kwargs: {{max_length: {s['max_length']}}}}}]",
                f"rollout.group_size={s['group_size']}",
                f"rollout.batch_tasks={s['tasks']}",
                f"rollout.max_tokens={s['max_tokens']}",
                f"rollout.concurrency={n}",
                f"rollout.max_batch={n}",
                f"algorithm.micro_batch_size={n}",
                f"optim.lr={s['lr']}",
                *extra,
            ],
        )
        self.trainer = DAPOTrainer(cfg)
        self.rows: list[dict[str, Any]] = []
        self.wall: list[float] = []

    def step(self) -> None:
        t0 = time.perf_counter()
        m = self.trainer.train_step()
        self.wall.append(time.perf_counter() - t0)
        self.rows.append(m)

    def close(self) -> None:
        self.trainer.close()

    def summary(self, warm: int) -> dict[str, float]:
        rows, wall = self.rows[warm:], self.wall[warm:]
        tokens = sum(m.get("charts/train_tokens", 0.0) for m in rows)
        rollout = sum(m["time/rollout_s"] for m in rows)
        rewards = [m["charts/reward"] for m in rows if m["charts/reward"] == m["charts/reward"]]
        lengths = [
            m["charts/response_tokens_mean"] for m in rows if "charts/response_tokens_mean" in m
        ]
        return {
            "step_s": statistics.median(wall),
            "trained_tokens_per_s": tokens / sum(wall),
            "trained_tokens_per_step": tokens / len(rows),
            "decode_utilization": statistics.mean(m["charts/decode_utilization"] for m in rows),
            "tail_share": sum(m["time/tail_s"] for m in rows) / rollout if rollout else 0.0,
            "rollout_s": statistics.median(m["time/rollout_s"] for m in rows),
            "train_s": statistics.median(m["time/train_s"] for m in rows),
            "reward": statistics.mean(rewards) if rewards else float("nan"),
            "reply_tokens_mean": statistics.mean(lengths) if lengths else float("nan"),
            "reply_tokens_max": max(
                (
                    m["charts/response_tokens_max"]
                    for m in rows
                    if "charts/response_tokens_max" in m
                ),
                default=float("nan"),
            ),
        }


def run(
    quick: bool = False,
    measured_steps: int | None = None,
    window: int | None = None,
    warm_start_dir: str | None = None,
    engine: str = "hf",
) -> dict[str, Any]:
    """Warm-start the tiny model, then step the three trainers in rotation (see the
    module docstring); ``engine``: the rollout engine of all three (``hf`` or ``vllm``)."""
    quick = quick or os.environ.get("AGENTGYM_PERF_QUICK") == "1"
    s = _settings(quick, measured_steps, window, engine)
    import torch

    torch.set_num_threads(s["threads"])
    warm = s["warmup_steps"]
    with tempfile.TemporaryDirectory(prefix="agentgym-longtail-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        kept = Path(warm_start_dir) if warm_start_dir else None
        if kept is not None and (kept / "config.json").is_file():
            model = kept  # a warm start an earlier run of this benchmark kept
        else:
            model = warm_start(work, s)
            if kept is not None:
                shutil.copytree(model, kept)
        sft_s = time.perf_counter() - t0
        sides = {name: _Side(name, model, work, s) for name in SIDES}
        try:
            names = list(sides)
            for i in range(warm + s["measured_steps"]):
                for name in names[i % 3 :] + names[: i % 3]:
                    sides[name].step()
        finally:
            for side in sides.values():
                side.close()
    got = {name: side.summary(warm) for name, side in sides.items()}
    figures: dict[str, Any] = {}
    for name, g in got.items():
        for k, v in g.items():
            figures[f"{name}_{k}"] = round(v, 4)
    figures.update(
        {
            "episodes_in_flight": s["group_size"] * s["tasks"],
            "max_tokens": s["max_tokens"],
            "window": s["window"],
            "measured_steps": s["measured_steps"],
            "warm_start_s": round(sft_s, 1),
            "threads": s["threads"],
            "engine": s["engine"],
        }
    )
    tps = {name: g["trained_tokens_per_s"] for name, g in got.items()}
    ratios = {
        "tppo_vs_dapo_trained_tokens_per_s": round(tps["tppo"] / tps["dapo"], 2),
        "tppo_vs_ppo_trained_tokens_per_s": round(tps["tppo"] / tps["ppo"], 2),
        "tppo_vs_dapo_step_s": round(got["tppo"]["step_s"] / got["dapo"]["step_s"], 2),
    }
    notes = (
        f"{ENV_ID} (max_length {s['max_length']}), tiny-qwen2 (91K parameters) warm-started on oracle replies "
        f"({s['sft_steps']} SFT steps), LoRA r=8, G={s['group_size']} x {s['tasks']} tasks in "
        f"flight, max_tokens={s['max_tokens']}, T-PPO window {s['window']}, rollout engine "
        f"{s['engine']}; {warm} warm-up + "
        f"{s['measured_steps']} measured steps per side, in rotation, {s['threads']} torch "
        "threads. T-PPO's reward is that of the episodes that ended in each step."
    )
    return {
        "title": "Long-tail bubble: all-sync DAPO / PPO vs T-PPO",
        "ratios": ratios,
        "figures": figures,
        "notes": notes,
    }


#: the planner's 671B layout (``agentgym plan``), for :func:`planner_estimate`
PLANNER_CONFIG = "configs/deepseek_v3_671b_48xh100.yaml"
PLANNER_TAIL = "rollout tail (few sequences left)"


def planner_estimate(config: str = PLANNER_CONFIG) -> dict[str, Any]:
    """What the planner's time model (:mod:`agentgym.plan`) says T-PPO gains at scale.

    All-sync DAPO: the planner's step for ``config``. T-PPO: the same config with
    ``algorithm.name=tppo`` (a critic: one valuation pass and its own training pass per
    mini-batch) and a window of a third of the response cap, its step without the
    rollout tail (a pool of responses in flight keeps the batch full: every decode step
    runs at full concurrency). Both train the same response tokens per step, so the ratio
    of their step times is the ratio of trained tokens per second.
    """
    from agentgym import load_config
    from agentgym.plan import PlanConfig, plan_inputs, step_spec, step_time

    sync = step_time(step_spec(plan_inputs(load_config(PlanConfig, config))))
    base = load_config(PlanConfig, config)
    window = max(1, base.rollout.max_tokens // 3)
    tppo_cfg = load_config(
        PlanConfig, config, ["algorithm.name=tppo", f"rollout.truncate_window={window}"]
    )
    tppo = step_time(step_spec(plan_inputs(tppo_cfg)))
    tail = tppo.idle.get(PLANNER_TAIL, 0.0)
    tppo_s = tppo.seconds - tail
    return {
        "config": config,
        "window": window,
        "all_sync_step_s": round(sync.seconds, 1),
        "all_sync_tail_s": round(sync.idle.get(PLANNER_TAIL, 0.0), 1),
        "all_sync_env_s": round(sync.idle.get("env/reward", 0.0), 1),
        "tppo_step_s": round(tppo_s, 1),
        "tppo_critic_s": round(tppo.seconds - sync.seconds, 1),
        "tppo_vs_dapo_trained_tokens_per_s": round(sync.seconds / tppo_s, 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a smaller, faster workload")
    p.add_argument("--steps", type=int, default=None, help="measured steps per side")
    p.add_argument("--window", type=int, default=None, help="T-PPO's rollout.truncate_window")
    p.add_argument(
        "--warm-start",
        default=None,
        help="keep the warm-start model in this folder, and reuse it when it is there",
    )
    p.add_argument(
        "--engine",
        choices=["hf", "vllm"],
        default="hf",
        help="the rollout engine of the three trainers (vllm: CUDA, or vLLM's CPU build)",
    )
    p.add_argument(
        "--planner",
        action="store_true",
        help="also print the planner's T-PPO estimate for the 671B layout",
    )
    args = p.parse_args(argv)
    if args.planner:
        est = planner_estimate()
        print(
            f"planner ({est['config']}): all-sync step {est['all_sync_step_s']} s (rollout "
            f"tail {est['all_sync_tail_s']} s, env {est['all_sync_env_s']} s); T-PPO (window "
            f"{est['window']}) {est['tppo_step_s']} s (critic +{est['tppo_critic_s']} s, no "
            f"tail): {est['tppo_vs_dapo_trained_tokens_per_s']}x all-sync DAPO's trained "
            "tokens/s"
        )
    out = run(
        quick=args.quick,
        measured_steps=args.steps,
        window=args.window,
        warm_start_dir=args.warm_start,
        engine=args.engine,
    )
    f = out["figures"]
    print(out["title"])
    print(
        f"  {'side':6} {'s/step':>8} {'trained tok/s':>14} {'tok/step':>9} {'decode util':>12} "
        f"{'tail share':>11} {'reward':>8} {'reply tok':>10}"
    )
    for n in SIDES:
        print(
            f"  {n:6} {f[n + '_step_s']:8.3f} {f[n + '_trained_tokens_per_s']:14.1f} "
            f"{f[n + '_trained_tokens_per_step']:9.1f} {f[n + '_decode_utilization']:12.1%} "
            f"{f[n + '_tail_share']:11.1%} {f[n + '_reward']:8.3f} "
            f"{f[n + '_reply_tokens_mean']:10.1f}"
        )
    print(
        "  seconds per step (median): "
        + ", ".join(
            f"{n} rollout {f[n + '_rollout_s']:.2f} / train {f[n + '_train_s']:.2f}" for n in SIDES
        )
    )
    print(f"  ratios: {out['ratios']}")
    print(f"  {out['notes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
