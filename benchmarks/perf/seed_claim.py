"""The seed's claim in miniature: multi-conversation DAPO with memory summaries against
single-context GRPO, on the same memory tasks, side by side.

The project's founding document says that structuring a task as a sequence of
conversations with a terminal reward, trained with DAPO, "substantially improves the
stability of GRPO" and "reduces the number of training steps required to achieve
equivalent performance to baseline GRPO by 50%". This benchmark tests that claim on a
task small enough for a CPU: ``agentgym/MemoryRecall-v0`` with 2 asked lockers and 2
distractors in 4 parts, anywhere (the "multi-code" task; the reward is the share of the
two codes answered right).

Arms: {context format} x {algorithm}, every one from the same warm start:

* formats: ``summary`` (a memory summary after every part; each conversation holds the
  task, the memory and one part), ``long`` (one conversation holds every part, every
  reply and the question: ``memory: false``, no truncation) and ``window`` (the long
  context cut to the summary arm's working context, ``context_window``: the task line
  stays, the oldest parts and replies fall out);
* algorithms: ``dapo`` (clip-higher 0.2/0.28, dynamic sampling, token-mean loss,
  DAPO's soft overlong punishment) and ``grpo`` (``algorithm.name: grpo``, as
  DeepSeekMath published it: symmetric clip 0.2, each sequence's token mean averaged
  over sequences, KL 0.04 to the warm start, no dynamic sampling, no overlong shaping).

What is the same for every arm: the tasks (training seeds and the held-out seeds), the
teacher and the warm start (one model per seed, trained by ``agentgym sft`` on the env's
exact oracle, ``oracle_forget: 0``, in all three formats at once: nothing is planted in
it), the LoRA adapter, learning rate, group size, tasks per batch, and the reply budget
of a policy call (``rollout.max_tokens``). What differs is only what the arm is named
for; DAPO's dynamic sampling generates more episodes per step than GRPO (the table
gives the tokens generated per step next to the steps).

Measured per arm and seed: held-out recall every ``eval_every`` steps, sampled at
temperature 1 (the policy being trained) and greedy, and greedy recall by the part that
showed each asked code (:func:`recall_by_part`: a policy that keeps one position's code
whatever is asked shows as one part near 100% and the others near 0); the training reward of every step
(temperature 1, every episode the step played); tokens generated and trained, and wall
seconds, per step; the working context (each episode's largest prompt, averaged). From
these: the steps each arm needs to reach the summary-DAPO arm's final recall (and the
``grpo`` long-context arm's, the seed's baseline), the step-to-step standard deviation
of the training reward, and collapse events (the training reward falls below half of
its best so far, with that best at least 0.1, and stays there for the next 5 steps).

Results go to ``--out`` (``runs/seed_claim`` by default): ``warm/`` (the warm starts),
``arms/ARM-sSEED.json`` (curves of one run; a run whose file exists is not repeated,
so an interrupted comparison continues where it stopped), ``results.json``,
``table.md`` and ``recall.png`` (the curves, the seed mean with a band from the lowest
to the highest seed).

Run: ``scripts/seed_claim.sh`` (the whole comparison, ~45 minutes on a 2-core machine) or
``python -m agentgym.benchmarks.perf.seed_claim [--smoke] [--seeds 0 1 2] [--arms ...]
[--out DIR] [--steps N]``; ``--smoke`` (and ``run(quick=True)``) is the same pipeline at a size
that takes a minute, for the tests.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_ID = "agentgym/MemoryRecall-v0"
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
#: the warm start (all three formats) and the summary-DAPO arm: the other arms are
#: overrides on top of the latter (:data:`FORMATS`, :data:`ALGORITHMS`)
SFT_CONFIG = CONFIGS / "seedclaim_sft.yaml"
RL_CONFIG = CONFIGS / "seedclaim_dapo.yaml"

#: the arms' algorithm settings, over seedclaim_dapo.yaml (which is DAPO's)
ALGORITHMS: dict[str, tuple[str, ...]] = {
    "dapo": (),
    # the preset fills only fields left at their defaults: the DAPO config's overlong
    # punishment is switched off by name; one round of batch_tasks groups, all trained
    "grpo": (
        "algorithm.name=grpo",
        "algorithm.overlong_penalty=false",
        "rollout.tasks_per_round=null",
    ),
}
FORMATS = ("summary", "long", "window")
ARMS = tuple(f"{fmt}-{algo}" for fmt in FORMATS for algo in ALGORITHMS)
#: the arm the others are measured against, and the seed's baseline
REFERENCE, BASELINE = "summary-dapo", "long-grpo"
COLLAPSE_PATIENCE = 5


@dataclass(frozen=True)
class Settings:
    """The size of a comparison (the full one, or the smoke form)."""

    seeds: tuple[int, ...] = (0, 1, 2)
    sft_overrides: tuple[str, ...] = ()
    rl_overrides: tuple[str, ...] = ()
    steps: int | None = None  # None: the RL config's run.max_steps
    eval_every: int = 5
    threads: int = 1


SMOKE = Settings(
    seeds=(0,),
    sft_overrides=("train.max_steps=4", "data.num_tasks=6"),
    rl_overrides=(
        "rollout.group_size=2",
        "rollout.batch_tasks=2",
        "rollout.tasks_per_round=2",
        "eval.num_tasks=2",
        "rollout.max_tokens=8",
        "algorithm.dynamic_sampling=false",  # a 4-step model solves nothing: train anyway
    ),
    steps=2,
    eval_every=1,
)


# ----------------------------------------------------------------------------- configs
def format_envs(fmt: str) -> list[dict[str, Any]]:
    """The ``envs`` section of one format: seedclaim_sft.yaml's env of that format (its
    envs are the formats, in :data:`FORMATS`' order)."""
    import yaml

    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; one of {FORMATS}")
    env = yaml.safe_load(SFT_CONFIG.read_text())["envs"][FORMATS.index(fmt)]
    return [{"id": env["id"], "kwargs": env["kwargs"]}]


def _warm_kept(out: Path, seed: int) -> bool:
    """Whether the seed's warm start is in ``out`` already (a finished one)."""
    return (out / "warm" / f"s{seed}" / "model" / "config.json").is_file()


def warm_start(out: Path, seed: int, s: Settings) -> Path:
    """The seed's warm start (``agentgym sft`` on the oracle's turns in every format);
    kept in ``out/warm/s<seed>`` and reused when its model is there."""
    from agentgym import load_config
    from agentgym.trainers import SFTConfig, run_sft

    folder = out / "warm" / f"s{seed}"
    if _warm_kept(out, seed):
        return folder / "model"
    if folder.exists():  # a warm start that did not finish: start it again
        import shutil

        shutil.rmtree(folder)
    cfg = load_config(
        SFTConfig,
        SFT_CONFIG,
        [
            f"run.output_dir={folder}",
            f"run.seed={seed}",
            f"model.init_seed={seed}",
            f"run.threads={s.threads}",
            "run.progress=false",
            "run.plots=false",
            "eval.at_ends=false",
            *s.sft_overrides,
        ],
    )
    run_sft(cfg)
    return folder / "model"


def arm_config(arm: str, seed: int, model: Path, folder: Path, s: Settings) -> Any:
    """The training config of one arm and seed."""
    from agentgym import load_config
    from agentgym.trainers import TrainConfig

    fmt, algo = arm.split("-")
    return load_config(
        TrainConfig,
        RL_CONFIG,
        [
            f"run.output_dir={folder}",
            f"run.seed={seed}",
            f"run.threads={s.threads}",
            "run.progress=false",
            "run.plots=false",
            "run.save_every=0",
            "eval.every=0",
            "eval.at_ends=false",
            f"model.path={model}",
            f"envs={json.dumps(format_envs(fmt))}",
            *ALGORITHMS[algo],
            *s.rl_overrides,
            *([f"run.max_steps={s.steps}"] if s.steps else []),
        ],
    )


# ----------------------------------------------------------------------------- one arm
def train_arm(arm: str, seed: int, model: Path, out: Path, s: Settings) -> dict[str, Any]:
    """Train one arm from the warm start; its curves (also written to
    ``out/arms/<arm>-s<seed>.json``, and read back from there when present)."""
    from agentgym.trainers import DAPOTrainer

    path = out / "arms" / f"{arm}-s{seed}.json"
    if path.is_file():
        return json.loads(path.read_text())
    cfg = arm_config(arm, seed, model, out / "runs" / f"{arm}-s{seed}", s)
    trainer = DAPOTrainer(cfg)
    steps, evals = [], []
    try:
        evals.append(_evaluate(trainer, 0))
        for step in range(1, cfg.run.max_steps + 1):
            t0 = time.perf_counter()
            m = trainer.train_step()
            steps.append(_step_row(step, m, time.perf_counter() - t0))
            if step % s.eval_every == 0 or step == cfg.run.max_steps:
                evals.append(_evaluate(trainer, step))
    finally:
        trainer.close()
    result = {"arm": arm, "seed": seed, "steps": steps, "evals": evals}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result) + "\n")
    return result


def _evaluate(trainer: Any, step: int) -> dict[str, float]:
    """Held-out recall sampled at the config's temperature and greedy, and the working
    context, at ``step``."""
    e = trainer.cfg.eval
    sampled_t = e.temperature
    sampled = trainer.evaluate()
    e.temperature = 0.0
    episodes: list[Any] = []
    try:
        greedy = trainer.evaluate(episodes)
    finally:
        e.temperature = sampled_t
    return {
        "step": step,
        "sampled": sampled["eval/reward"],
        "greedy": greedy["eval/reward"],
        "greedy_by_part": recall_by_part(episodes),
        "working_context": sampled["eval/working_context_mean"],
        "greedy_working_context": greedy["eval/working_context_mean"],
    }


def recall_by_part(episodes: Sequence[Any]) -> list[float | None]:
    """Recall by where the asked code was shown: entry ``p`` is the share of asked codes
    shown in part ``p + 1`` that the episodes answered right (None: no asked code there).
    Where a format loses codes shows here: a summary that keeps only the first part's
    code, say, recalls part 1 and nothing after it."""
    right: dict[int, list[bool]] = {}
    for ep in episodes:
        b = ep.reward_breakdown
        for locker, part in b.get("parts", {}).items():
            right.setdefault(part, []).append(b["answers"].get(locker) == b["expected"][locker])
    parts = max(right, default=0)
    return [sum(right[p]) / len(right[p]) if right.get(p) else None for p in range(1, parts + 1)]


def _step_row(step: int, m: dict[str, Any], wall: float) -> dict[str, float]:
    episodes = m.get("charts/episodes", 0.0)
    return {
        "step": step,
        "reward": m["charts/env_reward"],
        "generated_tokens": m.get("charts/response_tokens_mean", 0.0) * episodes,
        "trained_tokens": m.get("charts/train_tokens", 0.0),
        "episodes": episodes,
        "rounds": m.get("charts/generation_rounds", 1),
        "wall_s": wall,
    }


# ----------------------------------------------------------------------------- analysis
def collapses(rewards: Sequence[float], patience: int = COLLAPSE_PATIENCE) -> int:
    """Collapse events in a training-reward curve: a step whose reward falls below half
    of the best so far (a best of at least 0.1) and stays below it for the next
    ``patience`` steps; a collapse ends when the reward is back at half the best."""
    events, best, down = 0, -math.inf, False
    for i, r in enumerate(rewards):
        if down:
            down = r < 0.5 * best
        elif best >= 0.1 and r < 0.5 * best:
            later = rewards[i + 1 : i + 1 + patience]
            if len(later) == patience and all(x < 0.5 * best for x in later):
                events, down = events + 1, True
        best = max(best, r)
    return events


def first_reach(evals: Sequence[dict[str, float]], key: str, target: float) -> int | None:
    """The first evaluated step whose ``key`` is at least ``target`` (None: never)."""
    return next((e["step"] for e in evals if e[key] >= target - 1e-9), None)


def mean_curve(runs: Sequence[dict[str, Any]], key: str) -> list[dict[str, float]]:
    """The seed-mean (and lowest, highest) of ``key`` at each evaluated step."""
    out = []
    for i, e in enumerate(runs[0]["evals"]):
        vals = [r["evals"][i][key] for r in runs]
        out.append(
            {"step": e["step"], key: statistics.mean(vals), "lo": min(vals), "hi": max(vals)}
        )
    return out


def generated_by(run: dict[str, Any], step: int) -> float:
    """Tokens the run's policy generated in training up to and including ``step``."""
    return sum(x["generated_tokens"] for x in run["steps"] if x["step"] <= step)


def summarise(results: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per arm, over its seeds: final recall, steps to the reference arm's and the
    baseline's final recall (seed-mean curves), stability, cost per step."""
    finals = {arm: mean_curve(runs, "sampled")[-1]["sampled"] for arm, runs in results.items()}
    rows: dict[str, dict[str, Any]] = {}
    for arm, runs in results.items():
        sampled, greedy = mean_curve(runs, "sampled"), mean_curve(runs, "greedy")
        steps = [row for r in runs for row in r["steps"]]
        diffs = [b["reward"] - a["reward"] for r in runs for a, b in itertools.pairwise(r["steps"])]
        row = {
            "seeds": [r["seed"] for r in runs],
            "start_sampled": sampled[0]["sampled"],
            "start_greedy": greedy[0]["greedy"],
            "final_sampled": sampled[-1]["sampled"],
            "final_greedy": greedy[-1]["greedy"],
            "final_sampled_per_seed": [r["evals"][-1]["sampled"] for r in runs],
            "final_greedy_per_seed": [r["evals"][-1]["greedy"] for r in runs],
            "greedy_lift_per_seed": [
                r["evals"][-1]["greedy"] - r["evals"][0]["greedy"] for r in runs
            ],
            "reward_step_std": statistics.pstdev(diffs) if len(diffs) > 1 else 0.0,
            "collapses": sum(collapses([x["reward"] for x in r["steps"]]) for r in runs),
            "generated_tokens_per_step": statistics.mean(x["generated_tokens"] for x in steps),
            "trained_tokens_per_step": statistics.mean(x["trained_tokens"] for x in steps),
            "wall_s_per_step": statistics.median(x["wall_s"] for x in steps),
            "working_context": statistics.mean(
                e["working_context"] for r in runs for e in r["evals"]
            ),
        }
        if all("greedy_by_part" in r["evals"][0] for r in runs):  # (runs of earlier code: not)
            row["start_greedy_by_part"] = _mean_parts([r["evals"][0] for r in runs])
            row["final_greedy_by_part"] = _mean_parts([r["evals"][-1] for r in runs])
        for name, other in (("reference", REFERENCE), ("baseline", BASELINE)):
            if other in finals:
                target = finals[other]
                row[f"{name}_target"] = target
                row[f"steps_to_{name}"] = first_reach(sampled, "sampled", target)
        rows[arm] = row
    return rows


def _mean_parts(evals: Sequence[dict[str, Any]]) -> list[float | None]:
    """The seed mean of :func:`recall_by_part`'s lists, part by part."""
    width = max(len(e["greedy_by_part"]) for e in evals)
    out: list[float | None] = []
    for p in range(width):
        vals = [e["greedy_by_part"][p] for e in evals if p < len(e["greedy_by_part"])]
        vals = [v for v in vals if v is not None]
        out.append(statistics.mean(vals) if vals else None)
    return out


# ----------------------------------------------------------------------------- report
def table(rows: dict[str, dict[str, Any]], max_steps: int) -> str:
    """The Markdown table of :func:`summarise`'s rows."""

    def steps(v: int | None) -> str:
        return f"> {max_steps}" if v is None else str(v)

    head = (
        "| arm | working context (tokens) | recall sampled: start -> end | greedy: start -> end "
        f"| steps to {REFERENCE}'s end | steps to {BASELINE}'s end | training reward, "
        "step-to-step std | collapses | tokens generated / trained per step | s per step |"
    )
    lines = [head, "|" + "---|" * 10]
    for arm, r in rows.items():
        lines.append(
            f"| {arm} | {r['working_context']:.0f} | {r['start_sampled']:.1%} -> "
            f"{r['final_sampled']:.1%} | {r['start_greedy']:.1%} -> {r['final_greedy']:.1%} | "
            f"{steps(r.get('steps_to_reference'))} | {steps(r.get('steps_to_baseline'))} | "
            f"{r['reward_step_std']:.3f} | {r['collapses']} | "
            f"{r['generated_tokens_per_step']:.0f} / {r['trained_tokens_per_step']:.0f} | "
            f"{r['wall_s_per_step']:.1f} |"
        )
    parted = {arm: r for arm, r in rows.items() if "final_greedy_by_part" in r}
    if parted:
        lines += [
            "",
            "| arm | greedy recall of the codes shown in part 1 / 2 / ...: start -> end |",
        ]
        lines.append("|---|---|")
        for arm, r in parted.items():
            start, end = (
                " / ".join("-" if v is None else f"{v:.0%}" for v in r[key])
                for key in ("start_greedy_by_part", "final_greedy_by_part")
            )
            lines.append(f"| {arm} | {start} -> {end} |")
    return "\n".join(lines)


def plot(results: dict[str, list[dict[str, Any]]], path: Path) -> Path:
    """Held-out recall (sampled, greedy) per step and sampled recall per generated
    token: the seed mean, with a band from the lowest to the highest seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"summary": "tab:blue", "long": "tab:red", "window": "tab:green"}
    styles = {"dapo": "-", "grpo": "--"}
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    for arm, runs in results.items():
        fmt, algo = arm.split("-")
        kw = {"color": colors[fmt], "linestyle": styles[algo], "label": arm}
        for ax, key in zip(axes[:2], ("sampled", "greedy"), strict=True):
            c = mean_curve(runs, key)
            xs = [p["step"] for p in c]
            ax.plot(xs, [p[key] for p in c], **kw)
            ax.fill_between(
                xs, [p["lo"] for p in c], [p["hi"] for p in c], color=colors[fmt], alpha=0.12
            )
        c = mean_curve(runs, "sampled")
        spent = [statistics.mean(generated_by(r, p["step"]) for r in runs) for p in c]
        axes[2].plot([x / 1e3 for x in spent], [p["sampled"] for p in c], **kw)
    titles = (
        "held-out recall, sampled (T=1)",
        "held-out recall, greedy",
        "held-out recall, sampled, per token generated",
    )
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(title)
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("recall (share of asked codes right)")
        ax.grid(alpha=0.3)
    axes[0].set_xlabel("training step")
    axes[1].set_xlabel("training step")
    axes[2].set_xlabel("thousand tokens generated in training (seed mean)")
    axes[0].legend(fontsize=8)
    n = len(next(iter(results.values())))
    fig.suptitle(
        f"MemoryRecall multi-code: context format x algorithm ({n} seeds; band: lowest to highest seed)"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- the run
def compare(out: Path, s: Settings, arms: Sequence[str] = ARMS, say: Any = print) -> dict[str, Any]:
    """Warm starts, every arm on every seed, the summary, table and plot."""
    import torch

    torch.set_num_threads(s.threads)
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        raise SystemExit(f"unknown arm(s) {unknown}; the arms are {list(ARMS)}")
    t0 = time.perf_counter()
    results: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    for seed in s.seeds:
        t = time.perf_counter()
        kept = _warm_kept(out, seed)
        model = warm_start(out, seed, s)
        took = "kept from an earlier run" if kept else f"{time.perf_counter() - t:.0f} s"
        say(f"[seed_claim] warm start s{seed}: {took} ({model})")
        for arm in arms:
            t = time.perf_counter()
            r = train_arm(arm, seed, model, out, s)
            results[arm].append(r)
            e0, e1 = r["evals"][0], r["evals"][-1]
            say(
                f"[seed_claim] {arm} s{seed}: recall sampled {e0['sampled']:.1%} -> "
                f"{e1['sampled']:.1%}, greedy {e0['greedy']:.1%} -> {e1['greedy']:.1%} "
                f"({time.perf_counter() - t:.0f} s)"
            )
    rows = summarise(results)
    max_steps = results[arms[0]][0]["evals"][-1]["step"]
    md = table(rows, max_steps)
    png = plot(results, out / "recall.png")
    wall = time.perf_counter() - t0
    record = {
        "rows": rows,
        "table": md,
        "plot": str(png),
        "wall_s": wall,
        "load_end": os.getloadavg(),
        "settings": {"seeds": list(s.seeds), "arms": list(arms), "max_steps": max_steps},
    }
    (out / "results.json").write_text(json.dumps(record, indent=1) + "\n")
    (out / "table.md").write_text(md + "\n")
    return record


def run(quick: bool = False) -> dict[str, Any]:
    """The perf report's entry: the smoke form when ``quick``, else the whole comparison
    (in a temporary folder: ``scripts/seed_claim.sh`` keeps its results)."""
    import tempfile

    quick = quick or os.environ.get("AGENTGYM_PERF_QUICK") == "1"
    with tempfile.TemporaryDirectory(prefix="agentgym-seed-claim-") as tmp:
        rec = compare(Path(tmp), SMOKE if quick else Settings(), say=lambda _m: None)
    rows = rec["rows"]
    ref = rows[REFERENCE]
    ratios = {}
    if ref.get("steps_to_baseline") and rows[BASELINE].get("steps_to_baseline"):
        ratios["summary_dapo_vs_long_grpo_steps_to_baseline"] = round(
            ref["steps_to_baseline"] / rows[BASELINE]["steps_to_baseline"], 2
        )
    figures = {
        f"{arm}/{k}": v for arm, r in rows.items() for k, v in r.items() if not isinstance(v, list)
    }
    return {
        "title": "The seed's claim: multi-conversation DAPO vs single-context GRPO (MemoryRecall)",
        "ratios": ratios,
        "figures": figures,
        "notes": rec["table"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--out", default="runs/seed_claim", help="results folder (reused: finished runs are kept)"
    )
    p.add_argument(
        "--smoke", action="store_true", help="the pipeline at a size that takes a minute"
    )
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds (default 0 1 2)")
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS, help="arms to run")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument(
        "--steps", type=int, default=None, help="RL steps per arm (default: the config's)"
    )
    args = p.parse_args(argv)
    s = SMOKE if args.smoke else Settings()
    s = Settings(
        seeds=tuple(args.seeds) if args.seeds else s.seeds,
        sft_overrides=s.sft_overrides,
        rl_overrides=s.rl_overrides,
        steps=args.steps or s.steps,
        eval_every=s.eval_every,
        threads=args.threads,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rec = compare(out, s, args.arms)
    print(rec["table"])
    print(
        f"[seed_claim] {rec['wall_s']:.0f} s; load average at the end {rec['load_end']}; "
        f"{out / 'results.json'}, {rec['plot']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
