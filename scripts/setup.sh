#!/usr/bin/env bash
# Create .venv at the repository root and install agentgym (editable) with its dev tools.
#
#   scripts/setup.sh                      # agentgym[dev]: what the tests need (the default)
#   AGENTGYM_EXTRAS= scripts/setup.sh     # agentgym alone (the quickstart: fewer downloads)
#   AGENTGYM_EXTRAS=serve,tracking scripts/setup.sh
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
PY="${PYTHON:-python3}"
VENV="$ROOT/.venv"
STAMP="$VENV/.agentgym-install-stamp"
WANT="$(cat pyproject.toml setup.py | sha256sum | cut -d' ' -f1)"
EXTRAS="${AGENTGYM_EXTRAS-dev}"
SPEC="."
[[ -n "$EXTRAS" ]] && SPEC=".[$EXTRAS]"

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

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "[setup] creating virtual environment in .venv"
    "$PY" -m venv "$VENV"
fi
if up_to_date && "$VENV/bin/python" -c "import agentgym" 2>/dev/null; then
    echo "[setup] .venv is up to date"
    exit 0
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
quietly pip-tools "$VENV/bin/python" -m pip install --upgrade pip setuptools wheel
echo "[setup] installing torch==2.13.0 (CPU build) first"
quietly pip-torch "$VENV/bin/python" -m pip install "torch==2.13.0"
echo "[setup] installing agentgym$([[ -n "$EXTRAS" ]] && echo "[$EXTRAS]") and its dependencies (editable; log: .cache/setup-logs/pip-agentgym.log)"
quietly pip-agentgym "$VENV/bin/python" -m pip install -e "$SPEC"
# keep the extras of an earlier install of the same pyproject.toml (pip leaves them in place)
KEEP=""
[[ -f "$STAMP" && "$(head -n 1 "$STAMP")" == "$WANT" ]] && KEEP="$(installed_extras)"
{ echo "$WANT"; { echo "$KEEP"; tr ',' '\n' <<<"$EXTRAS"; } | sed '/^$/d' | sort -u; } > "$STAMP.new"
mv "$STAMP.new" "$STAMP"
echo "[setup] done"
