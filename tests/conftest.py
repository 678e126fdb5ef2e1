"""Shared pytest configuration: markers that skip what this machine cannot run."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:
        has_cuda = False
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)


@pytest.fixture
def in_ci() -> bool:
    return bool(os.environ.get("CI"))
