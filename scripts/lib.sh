# Shared by the set-up scripts (sourced, not run): run noisy installers quietly.
#
#   quietly NAME command...   runs the command with its output in .cache/setup-logs/NAME.log;
#                             on failure prints the log's last 40 lines and returns the status.
# The scripts then print what they do in a few lines of their own instead of pip's or
# apt's (setuptools alone prints ~30 lines of warnings for an editable install).

AGENTGYM_LOGS="${AGENTGYM_LOGS:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.cache/setup-logs}"

quietly() {
    local name="$1"
    shift
    mkdir -p "$AGENTGYM_LOGS"
    local log="$AGENTGYM_LOGS/$name.log"
    if "$@" >"$log" 2>&1; then
        return 0
    else
        local rc=$?
        echo "[setup] '$*' failed (exit $rc); the last lines of $log:" >&2
        tail -n 40 "$log" >&2
        return $rc
    fi
}
