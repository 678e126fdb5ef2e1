"""The table of every metrics key (``trainers/metric_keys.py``) and its page."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.trainers.metric_keys import METRICS, check_row, describe, markdown, undeclared

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_the_docs_page_is_the_table():
    assert DOCS.read_text() == markdown(), (
        "docs/metrics.md is stale: python -m agentgym.trainers.metric_keys > docs/metrics.md"
    )


def test_keys_and_patterns_find_their_row():
    assert describe("charts/reward").writer == "trainers/steps.py"
    assert "shaped" in describe("charts/reward").meaning  # not the summary's env reward
    assert describe("eval/MemoryRecall-v0/accuracy").key == "eval/{env}/accuracy"
    assert describe("eval/BalancedMath-v0#2/accuracy").key == "eval/{env}/accuracy"
    assert describe("kinds/summary_logprob_gain").key == "kinds/{kind}_logprob_gain"
    assert describe("tppo/lag_share_3").key == "tppo/lag_share_{n}"
    assert describe("time/wake_s").key == "time/{phase}_s"
    assert describe("episodes/failed/sandbox") is not None
    assert undeclared(["charts/reward", "charts/rewrd", "losses/total"]) == ["charts/rewrd"]


def test_every_row_is_complete_and_declared_once():
    keys = [m.key for m in METRICS]
    assert len(keys) == len(set(keys))
    assert all(m.unit and m.writer and m.meaning for m in METRICS)
    assert all(Path(DOCS.parents[1], m.writer).is_file() for m in METRICS)


def test_a_strict_metrics_log_refuses_an_undeclared_key():
    check_row({"step": 1, "losses/total": 0.5})
    with pytest.raises(KeyError, match=r"charts/new_thing.*add a row"):
        check_row({"step": 1, "charts/new_thing": 1.0})


def test_envs_that_share_an_id_keep_their_own_eval_figures():
    """Two envs under one id (one env with two sets of arguments): each has its own keys
    (``#k``, its place in ``envs``), and every key has a row in the table."""
    import dataclasses

    import gymnasium as gym

    from agentgym.policies import OraclePolicy
    from agentgym.rollouts import rollout
    from agentgym.trainers.evaluation import env_labels, eval_metrics

    ids = ["agentgym/MemoryRecall-v0", "agentgym/BalancedMath-v0", "agentgym/MemoryRecall-v0"]
    assert env_labels(ids) == ["MemoryRecall-v0#1", "BalancedMath-v0", "MemoryRecall-v0#3"]
    played = rollout(lambda: gym.make(ids[0]), OraclePolicy(), seeds=[0, 1])
    low = [dataclasses.replace(ep, reward=0.25) for ep in played]
    metrics = eval_metrics(ids, [played, played[:1], low])
    assert metrics["eval/MemoryRecall-v0#1/reward"] == pytest.approx(played[0].reward)
    assert metrics["eval/MemoryRecall-v0#3/reward"] == 0.25
    assert metrics["eval/BalancedMath-v0/episodes"] == 1
    assert undeclared(metrics) == []
