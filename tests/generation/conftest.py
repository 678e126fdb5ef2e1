"""Shared fixtures of the generation layer's tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tokenizer():
    from agentgym.generation import build_tokenizer

    return build_tokenizer()
