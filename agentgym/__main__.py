"""``python -m agentgym``: the command line (:mod:`agentgym.cli`)."""

from agentgym.cli import main

raise SystemExit(main())
