"""Episodes that fail for infrastructure reasons: counted, dropped, quarantined, never rewards.

Faults are injected for real: the toy env raises ``InfraError`` in ``step`` for the seeds
named in ``fail_on_seeds`` (see tests/helpers/trainer_toy_envs.py).
"""

from __future__ import annotations

import json

import pytest
from conftest import TINY_QWEN

from agentgym import InfraError, load_config
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.logging import read_jsonl
from agentgym.trainers.loop import DAPOTrainer


def _cfg(tmp_path, *extra: str) -> TrainConfig:
    return load_config(
        TrainConfig,
        None,
        [
            f"run.output_dir={tmp_path / 'run'}",
            "run.max_steps=2",
            "run.save_every=1",
            "run.threads=1",
            "run.progress=false",
            "run.plots=false",
            f"model.preset_overrides={json.dumps(TINY_QWEN)}",
            "rollout.group_size=4",
            "rollout.batch_tasks=2",
            "rollout.max_tokens=10",
            "algorithm.dynamic_sampling=false",
            *extra,
        ],
    )


def _envs(fail_on: list[int]) -> str:
    return f"envs=[{{id: agentgym-test/EvenChars-v0, kwargs: {{fail_on_seeds: {fail_on}}}}}]"


def test_a_failing_episode_drops_its_group_and_the_run_goes_on(tmp_path, toy_envs_registered):
    # training seeds count up from 0: step 1 draws seeds 0 and 1; seed 1 always fails
    history = DAPOTrainer(_cfg(tmp_path, _envs([1]), "rollout.max_failed_share=0.6")).train()
    first, second = history
    assert first["episodes/failed"] == 4 and first["episodes/failed/injected"] == 4
    assert first["charts/groups_failed"] == 1 and first["charts/groups_kept"] == 1
    assert first["charts/episodes"] == 4  # only the scored group is charted
    assert second["episodes/failed"] == 0 and second["step"] == 2
    run = tmp_path / "run"
    rows = read_jsonl(run / "failures.jsonl")
    assert {(r["step"], r["seed"], r["reason"], r["where"]) for r in rows} == {
        (1, 1, "injected", "step")
    }
    assert len(rows) == 4 and all("injected failure on seed 1" in r["message"] for r in rows)
    assert read_jsonl(run / "quarantine.jsonl") == [
        {"env_id": "agentgym-test/EvenChars-v0", "seed": 1, "step": 1}
    ]


def test_too_many_failures_stop_the_run_naming_the_reason(tmp_path, toy_envs_registered):
    trainer = DAPOTrainer(_cfg(tmp_path, _envs([0, 1])))
    with pytest.raises(InfraError, match=r"8 of 8 episodes failed.*max_failed_share=0.25") as e:
        trainer.train()
    assert e.value.reason == "too_many_failures"
    assert "failures.jsonl" in str(e.value)


def test_a_resumed_run_skips_quarantined_tasks(tmp_path, toy_envs_registered):
    cfg = _cfg(tmp_path, _envs([3]), "rollout.max_failed_share=0.6", "run.max_steps=1")
    DAPOTrainer(cfg).train()  # step 1: seeds 0, 1 (no failure)
    trainer = DAPOTrainer(cfg, resume=True)
    trainer.rollouts.quarantined.add(("agentgym-test/EvenChars-v0", 2))
    assert trainer.rollouts.draw_tasks(2) == {0: [3, 4]}  # 2 is skipped
    # a quarantine written by an earlier run is read back on resume
    (tmp_path / "run" / "quarantine.jsonl").write_text(
        json.dumps({"env_id": "agentgym-test/EvenChars-v0", "seed": 5, "step": 1}) + "\n"
    )
    again = DAPOTrainer(cfg, resume=True)
    assert ("agentgym-test/EvenChars-v0", 5) in again.rollouts.quarantined
    assert again.rollouts.draw_tasks(4) == {0: [2, 3, 4, 6]}
    trainer.close()
    again.close()


def test_an_episode_scored_after_a_retry_is_counted_and_recorded(tmp_path, toy_envs_registered):
    # seed 1's first attempt fails; its retry scores: nothing is dropped, but it shows
    markers = tmp_path / "markers"
    markers.mkdir()
    envs = (
        "envs=[{id: agentgym-test/EvenChars-v0, "
        f"kwargs: {{fail_on_seeds: [1], fail_once_dir: '{markers}'}}}}]"
    )
    first, _ = DAPOTrainer(_cfg(tmp_path, envs, "rollout.episode_retries=1")).train()
    assert first["episodes/failed"] == 0 and first["charts/groups_kept"] == 2
    assert first["episodes/retried"] == 1 and first["episodes/retried/injected"] == 1
    rows = read_jsonl(tmp_path / "run" / "failures.jsonl")
    assert [(r["step"], r["seed"], r["recovered"], r["failed_attempts"]) for r in rows] == [
        (1, 1, True, ["injected"])
    ]
    assert not (tmp_path / "run" / "quarantine.jsonl").exists()
