#!/usr/bin/env bash
# The vLLM checks a CPU cannot run, in one sitting on one CUDA GPU (H100/H200: under 10
# minutes): sleep/wake, the engine and training tests on CUDA (bf16 and float32), the
# server, expert (MoE) adapters through vLLM's fused MoE LoRA kernels, and the benchmark.
# Needs vLLM's CUDA build: AGENTGYM_EXTRAS=dev,vllm AGENTGYM_VLLM=none scripts/setup.sh
# (downloads the CUDA torch and vLLM wheels). Figures go to docs/vllm.md.
#
#   scripts/vllm_gpu_check.sh            # OUT=DIR keeps the runs (default: a temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
OUT="${OUT:-$(mktemp -d)}"
"$PY" -c "import torch, vllm
assert torch.cuda.is_available(), 'no CUDA device: this script is for a GPU machine'
print('vllm', vllm.__version__, 'on', torch.cuda.get_device_name(0))"
echo "[vllm-gpu] 1/4 gpu-marked tests (sleep/wake, GPU paths) and the vLLM tests on CUDA"
"$PY" -m pytest -q -s -p no:cacheprovider -m gpu tests/trainers/test_vllm_engine_run.py \
  tests/trainers/test_gpu_paths.py
"$PY" -m pytest -q -s -p no:cacheprovider tests/trainers/test_vllm_engine_run.py \
  tests/trainers/test_vllm_train.py tests/trainers/test_serve_vllm.py \
  tests/trainers/test_gpu_paths_vllm.py
echo "[vllm-gpu] 2/4 expert LoRA through vLLM (tiny-deepseek-v3, two steps): read the mismatch"
# (MLA at DeepSeek's head size, 512 + 64: vLLM's MLA takes no other below 320)
"$PY" -m agentgym train configs/quickstart_dapo.yaml "run.output_dir=$OUT/moe" model.path=null \
  model.preset=tiny-deepseek-v3 'model.preset_overrides={kv_lora_rank: 512, qk_rope_head_dim: 64}' \
  rollout.engine=vllm run.max_steps=2 run.save_every=0 eval.at_ends=false --overwrite
"$PY" - "$OUT/moe/metrics.jsonl" <<'PY'
import json, sys
for row in map(json.loads, open(sys.argv[1])):
    print({k: row.get(k) for k in ("step", "charts/logprob_mismatch", "charts/logprob_mismatch_max")})
PY
echo "[vllm-gpu] 3/4 HF vs vLLM rollout tokens/s, start-up, adapter swap"
"$PY" -m agentgym.benchmarks.perf.vllm_engine
echo "[vllm-gpu] 4/4 the long tail with vLLM (T-PPO continuing through vLLM)"
"$PY" -m agentgym.benchmarks.perf.longtail --quick --engine vllm
echo "[vllm-gpu] done; runs in $OUT"
