"""A*PO as published: an offline, cached, resumable value stage, then one sample per prompt."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import TINY_QWEN

from agentgym import ConfigError, Episode, load_config
from agentgym.cli import main
from agentgym.trainers.apo import CACHE_FILE, ValueCache, policy_key, stage_tasks
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.env_setup import resolve_envs
from agentgym.trainers.logging import read_jsonl
from agentgym.trainers.loop import DAPOTrainer

APO = [
    "algorithm.advantage=apo",
    "algorithm.loss=apo",
    "algorithm.dynamic_sampling=false",
    "algorithm.apo_value_samples=3",
    "algorithm.apo_value_beta=0.5",
    "rollout.group_size=1",
]


def _args(tmp_path, *extra: str) -> list[str]:
    return [
        f"run.output_dir={tmp_path / 'run'}",
        "run.max_steps=2",
        "run.threads=1",
        "run.progress=false",
        "run.plots=false",
        "envs=[{id: agentgym-test/EvenChars-v0}]",
        f"model.preset_overrides={json.dumps(TINY_QWEN)}",
        "rollout.batch_tasks=4",
        "rollout.max_tokens=8",
        "optim.lr=0.01",
        *APO,
        *extra,
    ]


def test_the_value_stage_is_cached_resumable_and_matches_the_formula(tmp_path, toy_envs_registered):
    args = _args(tmp_path)
    assert main(["apo-values", *args]) == 0
    rows = read_jsonl(tmp_path / "run" / CACHE_FILE)
    cfg = load_config(TrainConfig, None, args)
    tasks = stage_tasks(cfg, resolve_envs(cfg.envs))
    assert len(rows) == len(tasks) >= 2 * 4  # every task the run will draw (and a margin)
    assert [r["seed"] for r in rows] == [s for _, s in tasks]
    for r in rows:  # V* = beta log mean exp(r / beta) of the k reference rewards
        assert len(r["rewards"]) == 3 and r["policy"] == policy_key(cfg)
        expect = 0.5 * math.log(sum(math.exp(x / 0.5) for x in r["rewards"]) / 3)
        assert r["value"] == pytest.approx(expect, abs=1e-9)
        assert min(r["rewards"]) <= r["value"] <= max(r["rewards"])
    assert main(["apo-values", *args]) == 0  # resumed: nothing is redone
    assert len(read_jsonl(tmp_path / "run" / CACHE_FILE)) == len(rows)
    # another reference policy (more samples) gets rows of its own
    other = load_config(TrainConfig, None, [*args, "algorithm.apo_value_samples=4"])
    assert policy_key(other) != policy_key(cfg)
    assert len(ValueCache(tmp_path / "run" / CACHE_FILE, policy_key(other))) == 0


def test_apo_trains_with_one_sample_per_prompt(tmp_path, toy_envs_registered):
    trainer = DAPOTrainer(load_config(TrainConfig, None, _args(tmp_path)))
    assert trainer.apo_values is not None and len(trainer.apo_values) >= 8  # computed first
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    history = trainer.train()
    assert [m["charts/groups_kept"] for m in history] == [4, 4]  # groups of one, all kept
    assert all(m["charts/episodes"] == 4 for m in history)  # one sample per prompt
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(before[n], after[n]) for n in before)


def test_a_prompt_without_a_value_says_what_to_run(tmp_path):
    cache = ValueCache(tmp_path / CACHE_FILE, "p")
    cache.add("env/A-v0", 3, [0.0, 1.0], beta=0.0)
    assert cache.values_for([Episode("env/A-v0", "t", 3)]).tolist() == [1.0]
    with pytest.raises(ConfigError, match="agentgym apo-values"):
        cache.values_for([Episode("env/A-v0", "t", 4)])
    assert ValueCache(tmp_path / CACHE_FILE, "p").values == {("env/A-v0", 3): 1.0}  # read back
