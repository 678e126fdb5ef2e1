#!/usr/bin/env bash
# Make sure a Docker engine answers and the agentgym sandbox image is built.
#
# Idempotent and non-interactive (CI): installs Debian's docker.io, debootstrap and
# bubblewrap with apt-get when they are missing, starts dockerd in the background when no
# engine answers (waits until `docker info` works), then runs
# `.venv/bin/agentgym sandbox build-image`, which does nothing when the image exists.
# When everything is in place it only checks, in about a second.
# Exit status: 0 when the Docker sandbox is ready; 1 (with the reason) when it is not.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source "$ROOT/scripts/lib.sh"
export DEBIAN_FRONTEND=noninteractive
WAIT_S="${AGENTGYM_DOCKERD_WAIT:-60}"
LOG="${AGENTGYM_DOCKERD_LOG:-/var/log/agentgym-dockerd.log}"
AGENTGYM="$ROOT/.venv/bin/agentgym"

say() { echo "[ensure_docker] $*"; }
die() { echo "[ensure_docker] ERROR: $*" >&2; exit 1; }

SUDO=()
if [[ "$(id -u)" != 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    fi
fi
as_root() {
    if [[ "$(id -u)" == 0 || ${#SUDO[@]} -gt 0 ]]; then "${SUDO[@]}" "$@"; else return 126; fi
}

engine_up() {
    if command -v docker >/dev/null 2>&1; then
        timeout 20 docker info >/dev/null 2>&1
    elif [[ -x "$ROOT/.venv/bin/python" ]]; then
        timeout 20 "$ROOT/.venv/bin/python" -c 'import docker; docker.from_env().ping()' >/dev/null 2>&1
    else
        return 1
    fi
}

[[ -x "$AGENTGYM" ]] || die ".venv is missing; run scripts/setup.sh first."

# 1. packages -------------------------------------------------------------------------
missing=()
if ! engine_up && ! command -v dockerd >/dev/null 2>&1; then missing+=(docker.io); fi
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
[[ -f /usr/share/keyrings/debian-archive-keyring.gpg ]] || missing+=(debian-archive-keyring)
# the local backend runs the system python3 (it binds /usr read-only): AppGen's graders
# need pytest there too
if [[ -x /usr/bin/python3 ]] && ! /usr/bin/python3 -c 'import pytest' >/dev/null 2>&1; then
    missing+=(python3-pytest)
fi
if [[ ${#missing[@]} -gt 0 ]]; then
    command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and no apt-get here; install them by hand."
    say "installing ${missing[*]} with apt-get"
    quietly apt-update as_root apt-get update -qq \
        || die "apt-get update failed (are you root? is the package mirror reachable?)"
    quietly apt-docker as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" \
        || die "apt-get install ${missing[*]} failed (log above)."
fi

# 2. engine -----------------------------------------------------------------------------
if engine_up; then
    say "Docker engine answers"
else
    if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
        say "starting docker with systemctl"
        as_root systemctl start docker || say "systemctl start docker failed; trying dockerd directly"
    fi
    if ! engine_up; then
        command -v dockerd >/dev/null 2>&1 || die "dockerd is not installed (apt-get install docker.io)."
        if pgrep -x dockerd >/dev/null 2>&1; then
            say "dockerd is already starting; waiting for it"
        else
            say "starting dockerd in the background (log: $LOG)"
            as_root sh -c "setsid nohup dockerd >>'$LOG' 2>&1 < /dev/null &" \
                || die "cannot start dockerd: this needs root (run this script as root, or start Docker yourself)."
        fi
        for ((i = 0; i < WAIT_S; i++)); do
            engine_up && break
            sleep 1
        done
        if ! engine_up; then
            echo "[ensure_docker] last lines of $LOG:" >&2
            tail -n 20 "$LOG" >&2 2>/dev/null || true
            die "no Docker engine answered within ${WAIT_S} s (see the log above)."
        fi
        say "Docker engine is up"
    fi
fi

# 3. image (cached) -------------------------------------------------------------------
"$AGENTGYM" sandbox build-image || die "building the sandbox image failed (see above)."
