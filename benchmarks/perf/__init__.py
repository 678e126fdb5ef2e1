"""Performance benchmarks and the report that runs them all.

Every module in this package (other than :mod:`.report`, ``__main__`` and names that
start with ``_``) is one benchmark, runnable on its own as
``python -m agentgym.benchmarks.perf.<name>``. ``agentgym bench perf`` (or
``python -m agentgym.benchmarks.perf``) runs each one in its own subprocess and writes a
single Markdown report with the machine it ran on.

The convention a benchmark module may follow (the report copes with modules that do not):

``run(quick: bool = False) -> dict`` returning any of

* ``"title"``: a one-line name;
* ``"ratios"``: ``{name: float}``, the headline comparisons (agentgym vs a baseline,
  with the direction in the name, for example ``"speedup_vs_trl"``);
* ``"figures"``: ``{name: number or str}``, the measurements behind them (units in the
  name: ``"step_us"``, ``"tokens_per_s"``);
* ``"notes"``: free text (what was measured, settings, caveats).

Other top-level scalars are listed as figures, nested mappings are flattened with
``/``. A module without ``run`` is executed as ``python -m`` and its standard output is
copied into the report. Quick mode is passed as ``run(quick=True)`` and, for every
module, as the environment variable ``AGENTGYM_PERF_QUICK=1``.
"""

from __future__ import annotations


def report_main(argv: list[str] | None = None) -> int:
    """Run every perf benchmark and write the report (``agentgym bench perf``); see
    :mod:`.report` for the arguments."""
    from agentgym.benchmarks.perf.report import main

    return main(argv)


__all__ = ["report_main"]
