"""``hf:`` policies: the spec maps to the trainers' engine factory; a run on a tiny model.

The factory (``agentgym.generation:policy_from_spec``) belongs to the trainers
package. Until it exists the end-to-end test skips and says so; the mapping and the
result's description of an ``hf:`` policy are tested regardless.
"""

from __future__ import annotations

import importlib

import pytest

from agentgym.benchmarks.runner import describe_policy, run_suite
from agentgym.benchmarks.suites import Suite, SuiteEntry
from agentgym.policies import policy_schemes, register_policy_scheme


def hf_factory_or_skip():
    try:
        engines = importlib.import_module("agentgym.generation")
    except ImportError as e:
        pytest.skip(f"agentgym.generation cannot be imported yet ({e}); hf: needs it")
    if not hasattr(engines, "policy_from_spec"):
        pytest.skip(
            "agentgym.generation.policy_from_spec does not exist yet: the hf: policy "
            "scheme maps to it (entry-point group agentgym.policies) and the trainers provide it"
        )
    return engines.policy_from_spec


def test_hf_scheme_points_at_the_trainers_factory():
    # the trainers declare it (pyproject.toml's entry points); the core names no trainer module
    assert policy_schemes()["hf"] == "agentgym.generation:policy_from_spec"


def test_a_package_can_register_a_policy_scheme(monkeypatch):
    from agentgym import ConfigError, make_policy
    from agentgym.policies import _registered_schemes

    monkeypatch.setattr("agentgym.policies._registered_schemes", dict(_registered_schemes))
    register_policy_scheme("echo", "tests_policy_echo:make")
    assert policy_schemes()["echo"] == "tests_policy_echo:make"
    with pytest.raises(ConfigError, match="cannot import make from tests_policy_echo"):
        make_policy("echo:hello")
    with pytest.raises(ConfigError, match="module:function"):
        register_policy_scheme("bad", "no_colon")


def test_hf_policy_description_records_model_and_adapter():
    d = describe_policy("hf:/models/tiny@/runs/a/adapter", object(), None)
    assert d["kind"] == "hf"
    assert d["model_path"] == "/models/tiny" and d["adapter"] == "/runs/a/adapter"
    assert describe_policy("hf:/models/tiny", object())["adapter"] is None


def test_hf_policy_runs_a_suite_on_a_tiny_local_model(tmp_path):
    hf_factory_or_skip()
    from agentgym.generation import build_preset, build_tokenizer, save_model

    tokenizer = build_tokenizer()
    model = build_preset("tiny-qwen2", tokenizer, seed=0)
    path = save_model(model, tokenizer, tmp_path / "tiny")
    suite = Suite(
        name="memory-hf",
        version=1,
        entries=(SuiteEntry("default", "agentgym/MemoryRecall-v0", (0,)),),
        max_tokens=8,
        metrics=("reward", "mean_tokens"),
        primary_metric="reward",
        plot_metric="reward",
    )
    r = run_suite(suite, f"hf:{path}", out=tmp_path / "res", concurrency=1)
    assert r["complete"] and r["episodes"] == 1
    assert r["policy"]["kind"] == "hf" and r["policy"]["model_path"] == str(path)
    assert 0 < r["usage"]["completion_tokens"] <= 8 * r["usage"]["policy_calls"]
    assert 0.0 <= r["metrics"]["reward"]["value"] <= 1.0
