"""``run.report_to``: the same metrics, timeline and plots in TensorBoard and W&B (offline),
read back from the files they wrote; the config and git commit recorded."""

from __future__ import annotations

import json
import sys

import pytest
import wandb_log
from conftest import TINY_QWEN
from installed import require

from agentgym import ConfigError, UnknownNameError, load_config
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.logging import read_jsonl
from agentgym.trainers.tracking import check_report_to

require("tensorboard", reason="pip install 'agentgym[tracking]'")
require("wandb", reason="pip install 'agentgym[tracking]'")


def _tensorboard(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"images": 0, "scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_a_run_reports_to_tensorboard_and_wandb(tmp_path, toy_envs_registered, monkeypatch):
    from agentgym.trainers.loop import DAPOTrainer

    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "run"
    cfg = load_config(
        TrainConfig,
        None,
        [
            f"run.output_dir={out}",
            "run.max_steps=2",
            "run.threads=1",
            "run.progress=false",
            "run.report_to=[jsonl, tensorboard, wandb]",
            "envs=[{id: agentgym-test/EvenChars-v0}]",
            f"model.preset_overrides={json.dumps(TINY_QWEN)}",
            "rollout.group_size=4",
            "rollout.batch_tasks=2",
            "rollout.max_tokens=8",
        ],
    )
    DAPOTrainer(cfg).train()
    steps = [r for r in read_jsonl(out / "metrics.jsonl") if "charts/reward" in r]
    assert [r["step"] for r in steps] == [1, 2]

    info = json.loads((out / "run_info.json").read_text())
    assert len(info["git_commit"]) == 40 and info["config"]["rollout"]["group_size"] == 4

    # TensorBoard: the same numbers at the same steps, the timeline, the plots, the run info
    tb = _tensorboard(out / "tensorboard")
    tags = tb.Tags()
    for key in ("charts/reward", "losses/total", "time/step_s"):
        events = tb.Scalars(key)
        assert [e.step for e in events] == [1, 2]
        assert [e.value for e in events] == pytest.approx([r[key] for r in steps], rel=1e-6)
    assert {"timeline/train_s", "timeline/rollout_s", "timeline/generate_s"} <= set(tags["scalars"])
    assert {"plots/reward", "plots/response_length", "plots/timeline"} <= set(tags["images"])
    info_text = tb.Tensors("run/info/text_summary")[0].tensor_proto.string_val[0].decode()
    assert info["git_commit"] in info_text

    # W&B offline: the transaction log holds the same rows, the plots and the config
    logs = list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(logs) == 1
    rows = wandb_log.history(logs[0])
    by_step = {}
    for row in rows:
        by_step.setdefault(row["_step"], {}).update(row)
    for r in steps:
        assert by_step[r["step"]]["charts/reward"] == pytest.approx(r["charts/reward"])
        assert by_step[r["step"]]["timeline/train_s"] > 0
    images = [row for row in rows if row.get("plots/reward/_type") == "image-file"]
    assert len(images) == 1
    assert (logs[0].parent / "files" / images[0]["plots/reward/path"]).is_file()
    config = wandb_log.config(logs[0])
    assert config["git_commit"] == info["git_commit"]
    assert config["rollout"]["group_size"] == 4 and config["run"]["report_to"][-1] == "wandb"


def test_sft_reports_too(tmp_path, toy_envs_registered):
    from agentgym.trainers.sft import SFTConfig, run_sft

    out = tmp_path / "sft"
    cfg = load_config(
        SFTConfig,
        None,
        [
            f"run.output_dir={out}",
            "run.threads=1",
            "run.progress=false",
            "run.report_to=[tensorboard]",
            "envs=[{id: agentgym-test/EvenChars-v0}]",
            "data.source=oracle",
            "data.num_tasks=8",
            "train.max_steps=3",
            "train.batch_size=4",
            f"model.preset_overrides={json.dumps(TINY_QWEN)}",
            "eval.at_ends=false",
            "max_tokens=8",
        ],
    )
    run_sft(cfg)
    losses = _tensorboard(out / "tensorboard").Scalars("losses/sft")
    rows = read_jsonl(out / "metrics.jsonl")
    assert [e.step for e in losses] == [1, 2, 3]
    assert [e.value for e in losses] == pytest.approx([r["losses/sft"] for r in rows], rel=1e-6)


def test_report_to_names_are_checked():
    assert check_report_to("all") == ["jsonl", "tensorboard", "wandb"]
    assert check_report_to(["wandb", "wandb", "none"]) == ["wandb"]
    with pytest.raises(UnknownNameError, match="tensorboard"):
        check_report_to(["tensorbord"])
    with pytest.raises(UnknownNameError):
        load_config(TrainConfig, None, ["run.report_to=[mlflow]"])


def test_a_missing_package_names_the_extra(tmp_path, monkeypatch):
    from agentgym.trainers.tracking import start_tracking

    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ConfigError, match=r"agentgym-toolkit\[tracking\]"):
        start_tracking(None, tmp_path, report_to=["wandb"])
