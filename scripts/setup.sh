#!/usr/bin/env bash
# Create .venv at the repository root and install agentgym (editable) with its dev tools.
#
# Idempotent: when pyproject.toml has not changed since the last successful install, this
# only checks that the package imports and returns in about a second.
# torch is installed first, pinned, so that pip takes the CPU build instead of pulling a
# multi-GB CUDA build through another package's requirement.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source "$ROOT/scripts/lib.sh"
PY="${PYTHON:-python3}"
VENV="$ROOT/.venv"
STAMP="$VENV/.agentgym-install-stamp"
WANT="$(cat pyproject.toml setup.py | sha256sum | cut -d' ' -f1)"

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "[setup] creating virtual environment in .venv"
    "$PY" -m venv "$VENV"
fi
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]] && "$VENV/bin/python" -c "import agentgym" 2>/dev/null; then
    echo "[setup] .venv is up to date"
    exit 0
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
quietly pip-tools "$VENV/bin/python" -m pip install --upgrade pip setuptools wheel
echo "[setup] installing torch==2.13.0 (CPU build) first"
quietly pip-torch "$VENV/bin/python" -m pip install "torch==2.13.0"
echo "[setup] installing agentgym and its dependencies (editable; log: .cache/setup-logs/pip-agentgym.log)"
quietly pip-agentgym "$VENV/bin/python" -m pip install -e ".[dev]"
echo "$WANT" > "$STAMP"
echo "[setup] done"
