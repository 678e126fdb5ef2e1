"""Suites: validation, built-ins, loading from files, and the content hash."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace

import gymnasium as gym
import pytest

from agentgym.benchmarks import suites as suites_mod
from agentgym.benchmarks.suites import Suite, SuiteEntry, get_suite, register_suite, suite_names
from agentgym.errors import ConfigError, UnknownNameError


def test_builtin_suites_are_listed_and_well_formed():
    assert {"math-balanced", "memory-recall", "appgen"} <= set(suite_names())
    math = get_suite("math-balanced")
    assert math.primary_metric == "balanced"
    assert {"accuracy", "pass_at_k", "mean_tokens", "balanced"} <= set(math.metrics)
    assert [e.name for e in math.entries][-1] == "hard"
    assert math.entries[-1].env_kwargs == {"source": "hard"}
    assert [e.env_kwargs.get("levels") for e in math.entries[:-1]] == [1, 2, 3]
    assert get_suite("appgen").entries[0].seeds == tuple(range(24))  # 12 library + 12 full-stack
    assert get_suite("appgen").primary_metric == "pass_rate"
    assert get_suite("memory-recall").primary_metric == "reward"


def test_hash_is_stable_and_covers_the_definition(tiny_suite):
    h = tiny_suite.content_hash()
    assert len(h) == 64 and h == tiny_suite.content_hash()
    assert replace(tiny_suite, samples_per_task=3).content_hash() != h
    assert replace(tiny_suite, temperature=0.0).content_hash() != h
    assert replace(tiny_suite, max_tokens=100).content_hash() != h
    entries = (
        SuiteEntry("default", "agentgym/MemoryRecall-v0", (0, 1, 5)),
        *tiny_suite.entries[1:],
    )
    assert replace(tiny_suite, entries=entries).content_hash() != h
    # the same definition rebuilt from its dict hashes the same
    assert Suite.from_dict(json.loads(json.dumps(tiny_suite.to_dict()))).content_hash() == h


def test_hash_covers_the_registered_env_spec_and_scoring_version(monkeypatch):
    env_id = "agentgym-benchtest/Recall-v0"

    def register(**kwargs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gym.register(
                id=env_id, entry_point="agentgym.envs.memory_recall:MemoryRecallEnv", kwargs=kwargs
            )

    suite = Suite("s", 1, (SuiteEntry("a", env_id, (0,)),))
    try:
        register(num_facts=3)
        h1 = suite.content_hash()
        register(num_facts=4)  # same id, different registered defaults
        h2 = suite.content_hash()
        monkeypatch.setattr(suites_mod, "SCORING_VERSION", suites_mod.SCORING_VERSION + 1)
        h3 = suite.content_hash()
    finally:
        gym.registry.pop(env_id, None)
    assert len({h1, h2, h3}) == 3


def test_unregistered_env_gives_a_clear_error():
    suite = Suite("s", 1, (SuiteEntry("a", "agentgym/NotThere-v0", (0,)),))
    with pytest.raises(ConfigError, match=r"NotThere-v0.*not registered.*agentgym list"):
        suite.content_hash()


def test_unknown_suite_suggests_close_names():
    with pytest.raises(UnknownNameError, match="math-balanced"):
        get_suite("math-balance")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"samples_per_task": 0}, "samples_per_task"),
        ({"metrics": ("accuracy", "speed")}, "unknown metric"),
        ({"primary_metric": "balanced"}, "primary_metric"),
        ({"success": "vibes"}, "success rule"),
        ({"entries": ()}, "no entries"),
        ({"reference_tokens": 9000}, "reference_tokens"),
    ],
)
def test_invalid_suites_are_rejected(tiny_suite, change, message):
    d = {**tiny_suite.to_dict(), **change}
    if "entries" in change:
        d["entries"] = []
    else:
        d["entries"] = [e.to_dict() for e in tiny_suite.entries]
    with pytest.raises(ConfigError, match=message):
        Suite.from_dict(d)


def test_entries_reject_repeated_or_missing_seeds():
    with pytest.raises(ConfigError, match="repeats a seed"):
        SuiteEntry("a", "agentgym/MemoryRecall-v0", (1, 1))
    with pytest.raises(ConfigError, match="no seeds"):
        SuiteEntry("a", "agentgym/MemoryRecall-v0", ())


def test_suite_files_load_from_json_and_yaml(tmp_path, tiny_suite):
    import yaml

    d = tiny_suite.to_dict()
    d["entries"][0]["seeds"] = {"start": 0, "stop": 3}  # range form
    (tmp_path / "s.json").write_text(json.dumps(d))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(d))
    for name in ("s.json", "s.yaml"):
        loaded = get_suite(tmp_path / name)
        assert loaded.entries[0].seeds == (0, 1, 2)
        assert loaded.content_hash() == tiny_suite.content_hash()
    with pytest.raises(ConfigError, match="does not exist"):
        get_suite(tmp_path / "missing.json")


def test_limited_keeps_the_first_tasks_of_each_entry(tiny_suite):
    small = tiny_suite.limited(1)
    assert [e.seeds for e in small.entries] == [(0,), (100,)]
    assert small.num_tasks == 2 and tiny_suite.num_tasks == 6
    with pytest.raises(ConfigError):
        tiny_suite.limited(0)


def test_register_suite_refuses_to_shadow_builtins(tiny_suite):
    with pytest.raises(ConfigError, match="already exists"):
        register_suite(replace(tiny_suite, name="math-balanced"))
    register_suite(replace(tiny_suite, name="test-registered-suite"), overwrite=True)
    assert get_suite("test-registered-suite").num_tasks == 6
