#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite: lint, format check, pytest.
#
# Steps: create/refresh .venv (scripts/setup.sh); make sure a Docker engine runs and the
# sandbox image exists (scripts/ensure_docker.sh; installs Debian's docker.io where
# missing); install Chromium for the leaderboard page test where missing; ruff; pytest in
# parallel (pytest-xdist). Extra arguments go to pytest, e.g. `bash scripts/test.sh -k memory`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export VLLM_NO_USAGE_STATS=1  # the tests' vLLM engines report nothing anywhere

bash scripts/setup.sh

for helper in scripts/ensure_docker.sh scripts/ensure_chromium.sh; do
    if [[ -f "$helper" ]]; then
        bash "$helper"
    fi
done

# Compiled bytecode goes to a cache outside the checkout, shared by every process of the
# run: the suite starts hundreds of Python processes (ranks, launchers, CLI commands), and
# without it each one compiled agentgym's modules again (~0.2 s each). Nothing is written
# into the checkout (no __pycache__ there); a stale entry is recompiled, as Python does.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/agentgym/pycache}"

echo "[test] ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

echo "[test] pytest"
# 3 workers on the 2-core machine: much of the suite waits rather than computes (Docker
# gradings, page waits, heartbeats, engine start-ups), and a third worker fills those
# waits: pytest 21:12 with 2, 20:26 with 3, from a fresh clone (peak memory 6.4 GB)
WORKERS="${PYTEST_WORKERS:-3}"
set +e
# loadgroup: the tests of one xdist_group (a vLLM engine or server each) stay on one worker,
# which starts that engine once; the 20 slowest tests are printed at the end (their cost stays visible)
.venv/bin/python -m pytest -n "$WORKERS" --dist loadgroup --timeout=900 --durations=20 "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
    echo "[test] pytest collected no tests: that is a failure, not a pass" >&2
    exit 1
fi
exit $rc
