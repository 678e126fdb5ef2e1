#!/usr/bin/env bash
# The seed's claim in miniature: multi-conversation DAPO with memory summaries against
# single-context GRPO on the same MemoryRecall tasks (benchmarks/perf/seed_claim.py has
# the design). One warm start per seed (configs/seedclaim_sft.yaml), then six arms per
# seed -- {summary, long, window} x {dapo, grpo} (configs/seedclaim_dapo.yaml and its
# overrides) -- then the table ($OUT/table.md), the curves ($OUT/recall.png) and every
# figure ($OUT/results.json).
#
#   scripts/seed_claim.sh                      # the whole comparison: ~45 min on 2 cores
#   OUT=/tmp/sc SEEDS="0" scripts/seed_claim.sh   # one seed
#   ARMS="summary-dapo long-grpo" scripts/seed_claim.sh
#   SMOKE=1 OUT=/tmp/sc-smoke scripts/seed_claim.sh  # the pipeline in a minute
#
# A finished warm start or arm is kept in $OUT and not run again: a stopped comparison
# continues where it stopped. Runs at nice 10 (the machine is shared).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-runs/seed_claim}"
THREADS="${THREADS:-1}"
ARGS=(--out "$OUT" --threads "$THREADS")
if [ -n "${SEEDS:-}" ]; then read -ra S <<< "$SEEDS"; ARGS+=(--seeds "${S[@]}"); fi
if [ -n "${ARMS:-}" ]; then read -ra A <<< "$ARMS"; ARGS+=(--arms "${A[@]}"); fi
if [ -n "${SMOKE:-}" ]; then ARGS+=(--smoke); fi
AGENTGYM_EXTRAS="${AGENTGYM_EXTRAS-}" "$ROOT/scripts/setup.sh"
echo "[seed_claim] load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
exec nice -n "${NICE:-10}" "$ROOT/.venv/bin/python" -m agentgym.benchmarks.perf.seed_claim "${ARGS[@]}"
