"""Shared fixtures: tiny models and the toy environments."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import trainer_toy_envs as toy_envs

TINY_QWEN = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tokenizer():
    from agentgym.trainers.tokenizer import build_tokenizer

    return build_tokenizer()


@pytest.fixture
def toy_envs_registered():
    toy_envs.register()
    return toy_envs
