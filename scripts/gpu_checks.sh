#!/usr/bin/env bash
# The checks that need a CUDA device, as one script that finishes in under 10 minutes on one
# H100 or H200: every `gpu`-marked test, then the GPU-only measurements.
#
# Run it on a GPU machine from the repository root. Where the machine has a CUDA torch and
# transformers but not the project's other dependencies (and no package index), carry the
# pure-Python wheels in .whl/ and the script installs them and the project into a scratch
# folder, never the machine's own environment. The wheels a CUDA image with torch,
# transformers, peft and safetensors lacks (pip download --no-deps, py3-none-any):
# gymnasium farama-notifications math-verify latex2sympy2_extended antlr4-python3-runtime
# docker, torchao (model.quantize). DeepSpeed ships no wheel: its GPU test skips where it is missing.
#
#   bash scripts/gpu_checks.sh            # all gpu-marked tests, then the measurements
#   bash scripts/gpu_checks.sh -k fp8     # extra arguments go to pytest
#
# Output: a pytest summary, then one JSON line per measurement. With OUT set, a copy of the
# log goes to $OUT/gpu_checks.log.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
SITE="${AGENTGYM_GPU_SITE:-/tmp/agentgym-gpu-site}"
LOG="${OUT:-/tmp}/gpu_checks.log"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

if ! "$PY" -c "import agentgym" 2>/dev/null; then
    mkdir -p "$SITE"
    if compgen -G ".whl/*.whl" >/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" .whl/*.whl
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade \
        --target "$SITE" . || { echo "[gpu] could not install the project" >&2; exit 1; }
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi

{
    echo "[gpu] $("$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-", "transformers", transformers.__version__)')"
    echo "[gpu] pytest -m gpu"
    # -P: the package comes from the install above, not from the checkout on sys.path[0]
    mapfile -t files < <(grep -rl "mark.gpu" tests --include="test_*.py" | sort)
    "$PY" -P -m pytest -q -m gpu -p no:cacheprovider --continue-on-collection-errors \
        --timeout=300 -rs "${files[@]}" "$@"
    rc=$?
    for bench in benchmarks/perf/gpu_*.py; do
        [[ -f "$bench" ]] || continue
        echo "[gpu] $bench"
        timeout 180 "$PY" "$bench" || echo "[gpu] $bench failed (rc $?)"
    done
    exit $rc
} 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
