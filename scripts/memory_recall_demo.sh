#!/usr/bin/env bash
# MemoryRecall demo: warm-start a tiny model on the env's oracle turns, then train it with
# multi-conversation DAPO, and print a before/after table on held-out tasks.
#
#   scripts/memory_recall_demo.sh                 # everything (CPU is enough)
#   RUN_DIR=/tmp/mr THREADS=2 SEED=1 scripts/memory_recall_demo.sh   # run.seed and model.init_seed
#   SFT_ARGS="train.max_steps=3 data.num_tasks=40" DAPO_ARGS="run.max_steps=1" scripts/memory_recall_demo.sh  # smoke test
#
# Each episode is 3 document parts + a question, split into 4 conversations by memory
# summaries (memory.every_k_turns: 1): 7 policy turns, 3 of them summaries. The next
# conversation holds only the task and the summary, so the code must survive every
# summary; the reward is 1 if the final `locker N: CODE` is right, 0 otherwise.
# Stage 1 (agentgym sft): a 191K-parameter Qwen2-style model learns the oracle's turns.
# Stage 2 (agentgym train): DAPO with LoRA; one advantage per episode, applied to every
# token the policy wrote in every conversation (notes, summaries, answer); SUPO's
# overlong masking on; the table shows what the update did to act and summary turns.
# Target: held-out recall after DAPO >= warm start + 0.15.
#
# Measured on this code (2-core VM shared with other jobs, load average 3-15): the
# target is NOT reached on any of three seeds (issue 33). SEED=0: warm start 31.2%
# held-out greedy recall (128 tasks), 32.8% after 40 DAPO steps (stage 1 605 s, stage 2
# 535 s). SEED=1 and SEED=2: warm start 0.0% (128 tasks), so every DAPO group is all
# zeros and no update is made (stage 1 519 s and 379 s). Why, and the figures of each
# stage: the headers of configs/memory_recall_sft.yaml and configs/memory_recall_dapo.yaml.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RUN_DIR="${RUN_DIR:-runs/memory_recall_demo}"
THREADS="${THREADS:-1}"
SEED="${SEED:-0}"
# agentgym alone: the demo needs none of the extras (vLLM's CPU build comes with the tests')
AGENTGYM_EXTRAS="${AGENTGYM_EXTRAS-}" "$ROOT/scripts/setup.sh"
AG="$ROOT/.venv/bin/agentgym"
START=$(date +%s)

echo "[memory_recall] stage 1/2: supervised warm start on the oracle's turns"
# (the warm start is evaluated as step 0 of stage 2, so stage 1 skips its own before/after evaluation)
# (held-out recall every 250 steps is in $RUN_DIR/sft/metrics.jsonl)
# shellcheck disable=SC2086
"$AG" sft configs/memory_recall_sft.yaml "run.output_dir=$RUN_DIR/sft" "run.threads=$THREADS" \
  "run.seed=$SEED" "model.init_seed=$SEED" eval.at_ends=false ${SFT_ARGS:-}
SFT_END=$(date +%s)

echo "[memory_recall] stage 2/2: multi-conversation DAPO"
# shellcheck disable=SC2086
"$AG" train configs/memory_recall_dapo.yaml "run.output_dir=$RUN_DIR/dapo" \
  "model.path=$RUN_DIR/sft/model" "run.threads=$THREADS" "run.seed=$SEED" ${DAPO_ARGS:-}

"$ROOT/.venv/bin/python" - "$RUN_DIR" "$START" "$SFT_END" <<'PY'
import json, sys, time
from pathlib import Path

from agentgym import load_config
from agentgym.trainers import TrainConfig

run, start, sft_end = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
cfg = load_config(TrainConfig, run / "dapo" / "config.yaml")
rows = [json.loads(l) for l in (run / "dapo" / "metrics.jsonl").read_text().splitlines() if l.strip()]
evals = [r for r in rows if "eval/reward" in r]
before, after = evals[0], evals[-1]
steps = [r for r in rows if "charts/env_reward" in r]
filtered = sum(r["charts/groups_filtered"] for r in steps) / max(1, sum(r["charts/groups_generated"] for r in steps))


def mean(rs, key):
    vals = [r[key] for r in rs if isinstance(r.get(key), (int, float)) and r[key] == r[key]]
    return sum(vals) / len(vals) if vals else float("nan")


n, temp = int(before["eval/episodes"]), cfg.eval.temperature
b, a = before["eval/reward"], after["eval/reward"]
first, last = steps[:5], steps[-5:]
print()
print(f"Held-out tasks ({n}, temperature {temp:g})   warm start (SFT)   after DAPO ({after['step']} steps)   after-before   after/before")
print(f"recall (share of codes right)   {b:>16.1%}   {a:>22.1%}   {a - b:>+12.3f}   {a / max(b, 1e-9):>12.2f}")
print(f"episode: {before['eval/conversations_mean']:.1f} conversations; summary tokens per episode "
      f"{before['eval/summary_tokens_mean']:.1f} -> {after['eval/summary_tokens_mean']:.1f}; working context "
      f"(largest prompt) {before['eval/working_context_mean']:.0f} -> {after['eval/working_context_mean']:.0f} tokens")
print(f"training reward at temperature {cfg.rollout.temperature:g}: {mean(first, 'charts/env_reward'):.3f} "
      f"(first 5 steps) -> {mean(last, 'charts/env_reward'):.3f} (last 5); groups filtered (all rewards "
      f"equal): {filtered:.0%}; overlong episodes: {mean(steps, 'charts/overlong_share'):.0%}")
print(f"credit by turn kind, per step: trained tokens act {mean(steps, 'kinds/act_tokens'):.0f}, summary "
      f"{mean(steps, 'kinds/summary_tokens'):.0f}; log-prob gain per token (toward the advantage) act "
      f"{mean(steps, 'kinds/act_logprob_gain'):+.4f}, summary {mean(steps, 'kinds/summary_logprob_gain'):+.4f}")
ok = a - b >= 0.15
print(f"target (after >= before + 0.15): {'reached' if ok else 'NOT reached'}")
now = time.time()
print(f"wall time: stage 1 {sft_end - start:.0f} s, stage 2 {now - sft_end:.0f} s (with its evaluations), "
      f"total {now - start:.0f} s; plots in {run / 'dapo' / 'plots'}")
PY
