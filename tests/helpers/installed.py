"""Skipping a test module whose optional package is not installed, without importing it.

``pytest.importorskip`` imports the package to decide, in every pytest-xdist worker's
collection: vLLM, TRL, torchao and wandb cost seconds each, paid again by workers that
never run those tests. :func:`require` asks the import system whether the package is
there and nothing more; the tests import it when they run. (A package that is installed
but broken then fails its tests instead of skipping them: that is a failure to see.)
"""

from __future__ import annotations

import importlib.util

import pytest


def require(module: str, reason: str) -> None:
    """Skip the calling test module (at collection) unless ``module`` is installed."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(reason, allow_module_level=True)
