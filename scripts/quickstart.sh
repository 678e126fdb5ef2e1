#!/usr/bin/env bash
# Quickstart: warm-start a tiny model on verbose worked solutions, then make it concise
# with DAPO and a token cost, and print a before/after table on held-out problems.
#
#   scripts/quickstart.sh            # everything, from a fresh checkout (CPU is enough)
#   RUN_DIR=/tmp/qs scripts/quickstart.sh
#   SEED=1 RUN_DIR=runs/quickstart_seed1 scripts/quickstart.sh   # another seed (model init,
#                                    # example order, sampling; default 0)
#
# Interrupted (Ctrl-C saves a checkpoint after the step in progress), the same command
# continues where it stopped (--resume-if-present); run again once finished, it only
# prints the table.
#
# Stage 1 (agentgym sft): a ~0.8M-parameter Qwen2-style model, built in process, learns
# one-step arithmetic (BalancedMath generator, level 1) from verbose solutions.
# Stage 2 (agentgym train): DAPO with LoRA; the env's reward is 1 for a correct answer
# minus a linear token cost (correct answers only), 0 for a wrong one.
# Target: held-out accuracy >= 90% of the warm start's, with <= 40% of its tokens.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RUN_DIR="${RUN_DIR:-runs/quickstart}"
SEED="${SEED:-0}"
# torch's two CPU threads wait for each other by spinning (OpenMP's default); on a machine
# where other work takes the cores a spinning thread holds a core its partner needs, and
# a warm-start step took 26 s instead of 1.5 s (perf.sft, load average 14-20). Passive
# waiting sleeps instead. Set OMP_WAIT_POLICY yourself to choose otherwise.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
START=$(date +%s)
LOAD_START="$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?')"

# agentgym alone: the quickstart needs none of the extras (AGENTGYM_EXTRAS=dev for the tests')
AGENTGYM_EXTRAS="${AGENTGYM_EXTRAS-}" "$ROOT/scripts/setup.sh"
AG="$ROOT/.venv/bin/agentgym"
T_SETUP=$(date +%s)

echo "[quickstart] stage 1/2: supervised warm start on verbose solutions"
# (the warm start is evaluated as step 0 of stage 2, so stage 1 skips its own evaluation)
"$AG" sft configs/quickstart_sft.yaml "run.output_dir=$RUN_DIR/sft" eval.at_ends=false \
  "run.seed=$SEED" "model.init_seed=$SEED" --resume-if-present

T_SFT=$(date +%s)
echo "[quickstart] stage 2/2: DAPO with a token cost"
"$AG" train configs/quickstart_dapo.yaml "run.output_dir=$RUN_DIR/dapo" "model.path=$RUN_DIR/sft/model" \
  "run.seed=$SEED" --resume-if-present

# CPU seconds (user + system) of everything this script ran (bash's `times`, second line:
# children). On an idle 2-core machine it is about twice the time after set-up; much more
# than that means other work shared the cores (torch's two threads spin while they wait)
TIMES="$(mktemp)"
times >"$TIMES"
CPU="$(tail -n 1 "$TIMES")"
rm -f "$TIMES"
"$ROOT/.venv/bin/python" - "$RUN_DIR" "$START" "$T_SETUP" "$T_SFT" "$CPU" "$LOAD_START" "$SEED" <<'PY'
import json, re, sys, time
from pathlib import Path

run, (start, t_setup, t_sft) = Path(sys.argv[1]), map(int, sys.argv[2:5])
load_start, seed = sys.argv[6], sys.argv[7]
cpu_s = sum(float(m) * 60 + float(s) for m, s in re.findall(r"(\d+)m([\d.]+)s", sys.argv[5]))
rows = [json.loads(l) for l in (run / "dapo" / "metrics.jsonl").read_text().splitlines() if l.strip()]
evals = [r for r in rows if "eval/accuracy" in r]
before, after = evals[0], evals[-1]
acc_ratio = after["eval/accuracy"] / max(before["eval/accuracy"], 1e-9)
tok_ratio = after["eval/response_tokens_mean"] / before["eval/response_tokens_mean"]
n = int(before["eval/episodes"])
print()
print(f"Held-out problems ({n}, greedy)     warm start (SFT)   after DAPO   after/before")
print(f"accuracy                          {before['eval/accuracy']:>14.1%}   {after['eval/accuracy']:>10.1%}   {acc_ratio:>12.2f}")
print(f"mean response tokens              {before['eval/response_tokens_mean']:>14.1f}   {after['eval/response_tokens_mean']:>10.1f}   {tok_ratio:>12.2f}")
ok = acc_ratio >= 0.9 and tok_ratio <= 0.4
print(f"target (accuracy >= 0.90x, tokens <= 0.40x): {'reached' if ok else 'NOT reached'} (seed {seed})")
end = time.time()
try:
    load_end = Path("/proc/loadavg").read_text().split()[0]
except OSError:
    load_end = "?"
print(
    f"total wall time: {end - start:.0f} s (set-up {t_setup - start} s, warm start "
    f"{t_sft - t_setup} s, DAPO and evaluation {end - t_sft:.0f} s); CPU time {cpu_s:.0f} s; "
    f"load average {load_start} at the start, {load_end} at the end (other work on the "
    f"machine slows every phase); plots in {run / 'dapo' / 'plots'}"
)
PY
