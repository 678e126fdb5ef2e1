"""``python -m agentgym.benchmarks.perf``: run every perf benchmark, write one report."""

from __future__ import annotations

import sys

from agentgym.benchmarks.perf.report import main

if __name__ == "__main__":
    sys.exit(main())
