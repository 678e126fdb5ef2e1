#!/usr/bin/env bash
# Make sure a headless-capable Chromium exists at /usr/bin/chromium (for the leaderboard
# page test in tests/benchmarks). Installs Debian's `chromium` package with apt-get only
# where it is missing; does nothing otherwise. Needs root (or sudo) to install.
#
# Set AGENTGYM_SKIP_CHROMIUM=1 to skip (the browser test then skips outside CI and fails
# in CI, where CI is set).
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

if [[ "${AGENTGYM_SKIP_CHROMIUM:-}" == "1" ]]; then
    echo "[chromium] AGENTGYM_SKIP_CHROMIUM=1: not checking"
    exit 0
fi
if [[ -x /usr/bin/chromium ]]; then
    echo "[chromium] found /usr/bin/chromium"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "[chromium] /usr/bin/chromium is missing and apt-get is not available;" \
        "install Chromium by hand (the leaderboard browser test needs it)" >&2
    exit 1
fi

SUDO=""
if [[ "$(id -u)" != "0" ]]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "[chromium] not root and no sudo: run 'apt-get install chromium' as root" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
# An apt cache that does not know the package yet needs an update first.
if ! apt-cache show chromium >/dev/null 2>&1; then
    echo "[chromium] apt-get update"
    quietly apt-update $SUDO apt-get update -q
fi
echo "[chromium] apt-get install chromium (log: .cache/setup-logs/apt-chromium.log)"
quietly apt-chromium $SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
if [[ ! -x /usr/bin/chromium ]]; then
    echo "[chromium] the chromium package installed but /usr/bin/chromium is missing" >&2
    exit 1
fi
/usr/bin/chromium --version || true
