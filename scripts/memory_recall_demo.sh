#!/usr/bin/env bash
# MemoryRecall demo: warm-start a tiny model on the env's oracle turns, then train it with
# multi-conversation DAPO, and print a before/after table on held-out tasks.
#
#   scripts/memory_recall_demo.sh                 # everything (CPU is enough)
#   RUN_DIR=/tmp/mr THREADS=2 scripts/memory_recall_demo.sh
#   SFT_ARGS="train.max_steps=30" DAPO_ARGS="run.max_steps=2" scripts/memory_recall_demo.sh  # smoke test
#
# Each episode is 3 document parts + a question, split into 4 conversations by memory
# summaries (memory.every_k_turns: 1): 7 policy turns, 3 of them summaries. The next
# conversation holds only the task and the summary, so the code must survive every
# summary; the reward is 1 if the final `locker N: CODE` is right, 0 otherwise.
# Stage 1 (agentgym sft): a ~190K-parameter Qwen2-style model learns the oracle's turns;
# it is stopped while it still loses codes on the way (partial recall).
# Stage 2 (agentgym train): DAPO with LoRA; one advantage per episode, applied to every
# token the policy wrote in every conversation (notes, summaries, answer).
# Target: held-out reward after DAPO >= warm start + 0.15 (or >= 1.5x).
# Numbers measured on a 2-core shared VM are in the headers of the two configs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RUN_DIR="${RUN_DIR:-runs/memory_recall_demo}"
THREADS="${THREADS:-1}"
"$ROOT/scripts/setup.sh"
AG="$ROOT/.venv/bin/agentgym"
START=$(date +%s)

echo "[memory_recall] stage 1/2: supervised warm start on the oracle's turns"
# (the warm start is evaluated as step 0 of stage 2, so stage 1 skips its own before/after evaluation)
# (held-out recall every 250 steps is in $RUN_DIR/sft/metrics.jsonl)
# shellcheck disable=SC2086
"$AG" sft configs/memory_recall_sft.yaml "run.output_dir=$RUN_DIR/sft" "run.threads=$THREADS" \
  eval.at_ends=false ${SFT_ARGS:-}
SFT_END=$(date +%s)

echo "[memory_recall] stage 2/2: multi-conversation DAPO"
# shellcheck disable=SC2086
"$AG" train configs/memory_recall_dapo.yaml "run.output_dir=$RUN_DIR/dapo" \
  "model.path=$RUN_DIR/sft/model" "run.threads=$THREADS" ${DAPO_ARGS:-}

"$ROOT/.venv/bin/python" - "$RUN_DIR" "$START" "$SFT_END" <<'PY'
import json, sys, time
from pathlib import Path

from agentgym import OraclePolicy, load_config, rollout
from agentgym.trainers import TrainConfig, env_kwargs, load_model

run, start, sft_end = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
cfg = load_config(TrainConfig, run / "dapo" / "config.yaml")
rows = [json.loads(l) for l in (run / "dapo" / "metrics.jsonl").read_text().splitlines() if l.strip()]
evals = [r for r in rows if "eval/reward" in r]
before, after = evals[0], evals[-1]
steps = [r for r in rows if "charts/env_reward" in r]
filtered = sum(r["charts/groups_filtered"] for r in steps) / max(1, sum(r["charts/groups_generated"] for r in steps))

# episode structure under the trained tokenizer's token counts (oracle play, held-out seeds)
_, tok = load_model(run / "sft" / "model")
spec = cfg.envs[0]
eps = rollout(spec.id, OraclePolicy(), seeds=range(cfg.eval.seed_start, cfg.eval.seed_start + 8),
              env_kwargs=env_kwargs(spec, tok))
convs = sum(e.num_conversations for e in eps) / len(eps)
turns = sum(len(e.turns) for e in eps) / len(eps)

n = int(before["eval/episodes"])
b, a = before["eval/reward"], after["eval/reward"]
print()
print(f"Held-out tasks ({n}, greedy)        warm start (SFT)   after DAPO ({after['step']} steps)   after-before   after/before")
print(f"recall (share of codes right)   {b:>16.1%}   {a:>22.1%}   {a - b:>+12.3f}   {a / max(b, 1e-9):>12.2f}")
print(f"episode: {convs:.1f} conversations, {turns:.1f} policy turns (oracle play, same env config)")
first, last = steps[:5], steps[-5:]
mean = lambda rs: sum(r["charts/env_reward"] for r in rs) / len(rs)
print(f"training reward at temperature {cfg.rollout.temperature:g}: {mean(first):.3f} (first 5 steps) -> "
      f"{mean(last):.3f} (last 5); groups filtered (all rewards equal): {filtered:.0%}")
ok = a - b >= 0.15 or (b > 0 and a >= 1.5 * b)
print(f"target (after >= before + 0.15, or >= 1.5x): {'reached' if ok else 'NOT reached'}")
now = time.time()
print(f"wall time: stage 1 {sft_end - start:.0f} s, stage 2 {now - sft_end:.0f} s (with both evaluations), "
      f"total {now - start:.0f} s; plots in {run / 'dapo' / 'plots'}")
PY
