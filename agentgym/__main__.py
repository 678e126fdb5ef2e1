"""``python -m agentgym``: the command line (:mod:`agentgym.cli`)."""

try:
    from agentgym.cli import console
except KeyboardInterrupt:  # Ctrl-C while the imports load: no traceback
    raise SystemExit(130) from None

console()
