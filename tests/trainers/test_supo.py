"""SUPO's pieces in the DAPO loop (issue 33): overlong masking of episodes cut off by the
env's conversation limit, and credit by turn kind (act vs memory summary) in the metrics
and in samples.jsonl. Real trainer, tiny model, the two-conversation toy env scored by
even characters (an untrained model's samples differ in reward)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import TINY_QWEN

from agentgym import load_config
from agentgym.errors import UnknownNameError
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.logging import read_jsonl
from agentgym.trainers.loop import DAPOTrainer


def _cfg(tmp_path, *extra: str) -> TrainConfig:
    return load_config(
        TrainConfig,
        None,
        [
            f"run.output_dir={tmp_path / 'run'}",
            "run.max_steps=1",
            "run.threads=1",
            "run.progress=false",
            "run.plots=false",
            "envs=[{id: agentgym-test/TwoPartEven-v0}]",
            f"model.preset_overrides={json.dumps(TINY_QWEN)}",
            "rollout.group_size=4",
            "rollout.batch_tasks=2",
            "rollout.max_tokens=8",
            "algorithm.dynamic_sampling=false",
            "optim.lr=0.01",
            *extra,
        ],
    )


def _lora(trainer: DAPOTrainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}


@pytest.mark.parametrize("treatment", ["mask", "train"])
def test_episodes_out_of_conversations_are_masked_or_trained(
    tmp_path, toy_envs_registered, treatment
):
    # one conversation allowed: every episode ends at its summary, before its last turn
    cfg = _cfg(
        tmp_path,
        "envs=[{id: agentgym-test/TwoPartEven-v0, kwargs: {memory: {max_conversations: 1}}}]",
        f"algorithm.overlong_episodes={treatment}",
        "run.max_steps=2",
    )
    trainer = DAPOTrainer(cfg)
    before = _lora(trainer)
    rows = trainer.train()
    after = _lora(trainer)
    m = rows[-1]
    assert m["charts/overlong_share"] == 1.0
    moved = any(not torch.equal(before[n], after[n]) for n in before)
    if treatment == "mask":
        assert m["charts/masked_episodes"] == 8 and m["charts/update_skipped"] == 1
        assert not moved  # no gradient from an episode that ran out of summary rounds
    else:
        assert m["charts/masked_episodes"] == 0 and m["charts/update_skipped"] == 0
        assert moved


def test_overlong_treatment_is_checked(tmp_path):
    with pytest.raises(UnknownNameError, match="overlong_episodes"):
        _cfg(tmp_path, "algorithm.overlong_episodes=drop")


def test_the_update_is_broken_down_by_turn_kind(tmp_path, toy_envs_registered):
    trainer = DAPOTrainer(_cfg(tmp_path, "algorithm.kind_stats=true", "run.max_steps=2"))
    rows = trainer.train()
    m = rows[-1]
    # every episode: act, summary, act (two conversations); 8 episodes trained
    assert m["kinds/act_turns"] == 16 and m["kinds/summary_turns"] == 8
    assert m["kinds/summary_tokens"] > 0 and m["kinds/act_tokens"] > m["kinds/summary_tokens"]
    # the update moved both kinds of turn the way their advantages asked
    assert m["kinds/act_logprob_gain"] > 0 and m["kinds/summary_logprob_gain"] > 0
    # next to the reward: the working context and the summaries' cost
    assert m["charts/working_context_mean"] > 0 and m["charts/summary_tokens_mean"] > 0
    assert m["charts/conversations_mean"] == 2.0 and m["charts/overlong_share"] == 0.0
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    assert samples
    for row in samples:
        kinds = row["kinds"]
        assert kinds["summary"]["turns"] == 1 and kinds["act"]["turns"] == 2
        written = [t for t in row["turns"] if t["kind"] == "summary"]
        assert kinds["summary"]["tokens"] == sum(t["tokens"] for t in written)
        assert all(t["prompt_tokens"] > 0 for t in row["turns"])
        assert kinds["summary"]["logprob_mean"] < 0


def test_kind_gain_is_off_by_default_and_counts_stay(tmp_path, toy_envs_registered):
    m = DAPOTrainer(_cfg(tmp_path)).train()[-1]
    assert m["kinds/summary_turns"] == 8
    assert "kinds/summary_logprob_gain" not in m
    assert math.isfinite(m["charts/working_context_mean"])
