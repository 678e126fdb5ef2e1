"""SFT places the model the way the trainer does (issue 25): ``model.dtype: bfloat16``
stores the frozen base in bf16 and trains under autocast with float32 trainable weights;
batches go to the model's device."""

from __future__ import annotations

import json
import math

import torch
from conftest import TINY_QWEN

from agentgym import load_config
from agentgym.trainers.logging import read_jsonl
from agentgym.trainers.sft import SFTConfig, run_sft


def _cfg(tmp_path, *extra: str) -> SFTConfig:
    return load_config(
        SFTConfig,
        None,
        [
            f"run.output_dir={tmp_path / 'sft'}",
            "run.threads=1",
            "run.progress=false",
            "envs=[{id: agentgym-test/EvenChars-v0}]",
            "data.source=oracle",
            "data.num_tasks=8",
            "train.max_steps=3",
            "train.batch_size=4",
            f"model.preset_overrides={json.dumps(TINY_QWEN)}",
            "eval.at_ends=false",
            "max_tokens=8",
            *extra,
        ],
    )


def test_sft_in_bf16_keeps_float32_master_weights_and_learns(
    tmp_path, toy_envs_registered, monkeypatch
):
    seen = {}
    import agentgym.trainers.learner as learner_module  # the SFT run's learner upcasts

    real = learner_module.keep_master_weights

    def spy(model):
        n = real(model)
        seen["dtypes"] = {p.dtype for p in model.parameters() if p.requires_grad}
        seen["frozen"] = {p.dtype for p in model.parameters() if not p.requires_grad}
        return n

    monkeypatch.setattr(learner_module, "keep_master_weights", spy)
    run_sft(_cfg(tmp_path, "model.dtype=bfloat16", "lora.enabled=true"))
    assert seen["dtypes"] == {torch.float32}  # the adapter: float32 masters
    assert seen["frozen"] == {torch.bfloat16}  # the base: bf16
    losses = [r["losses/sft"] for r in read_jsonl(tmp_path / "sft" / "metrics.jsonl")]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0]
