"""What ``agentgym.envs.math`` and its generator package export, and where it comes from."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import agentgym.envs.math as math_env
import agentgym.envs.math.generator as generator

GENERATOR_DIR = Path(generator.__file__).parent


@pytest.mark.parametrize("module", [math_env, generator])
def test_every_exported_name_resolves(module):
    for name in module.__all__:
        assert getattr(module, name) is not None, name


def test_the_package_exports_the_generators_own_objects():
    assert math_env.generate is generator.generate
    assert math_env.Problem is generator.Problem
    assert math_env.KINDS is generator.KINDS
    assert math_env.LEVELS == (1, 2, 3)
    assert math_env.get_pool() is math_env.get_pool()  # one pool per process


def test_one_module_per_problem_kind():
    for kind in generator.KINDS:
        module = importlib.import_module(f"agentgym.envs.math.generator.{kind}")
        assert module.__all__ == [kind]
        assert callable(getattr(module, kind))


def test_generator_modules_say_what_they_own_and_stay_small():
    for path in sorted(GENERATOR_DIR.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert text.startswith('"""'), path.name
        assert len(text.splitlines()) < 600, path.name
