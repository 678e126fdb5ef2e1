"""The shipped training configs run: each one, one step, on a tiny stand-in for the model
its ``model.path`` names (the quickstart's warm start is minutes of SFT; its shape is not
what is tested here), and its metrics carry what the config is for (the critic's value
loss and explained variance for VAPO and T-PPO, the APO baseline's values)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import TINY_QWEN

from agentgym import load_config
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.logging import read_jsonl
from agentgym.trainers.loop import DAPOTrainer

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

#: what each config's step must report beyond the common metrics
EXPECTED = {
    "quickstart_dapo.yaml": ("losses/total",),
    "memory_recall_dapo.yaml": ("losses/total",),
    "memory_recall_multi_dapo.yaml": ("losses/total",),
    "seedclaim_dapo.yaml": ("losses/total",),
    "vapo_balanced_math.yaml": ("losses/value", "critic/explained_variance"),
    "tppo_longtail.yaml": ("losses/value", "critic/explained_variance"),
    "apo_balanced_math.yaml": ("losses/total",),
}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A tiny model with a BPE tokenizer learned from the configs' envs, as the SFT
    configs build theirs (MemoryRecall's token budget assumes one that compresses)."""
    import gymnasium as gym

    import agentgym  # noqa: F401  (registers the envs)
    from agentgym.generation import build_preset, build_tokenizer, save_model

    texts = []
    for name in sorted(EXPECTED):  # each config's envs with its own arguments
        for spec in yaml.safe_load((CONFIGS / name).read_text())["envs"]:
            env = gym.make(spec["id"], **spec.get("kwargs", {}))
            texts += [str(env.reset(seed=seed)[0]) for seed in range(20)]
            env.close()
    tok = build_tokenizer(texts, 512)
    model = build_preset("tiny-qwen2", tok, overrides=TINY_QWEN)
    return Path(save_model(model, tok, tmp_path_factory.mktemp("tiny") / "model"))


def test_every_training_config_is_listed():
    shipped = {p.name for p in CONFIGS.glob("*.yaml")}
    trainable = {n for n in shipped if not n.endswith("_sft.yaml") and "671b" not in n}
    assert trainable == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_shipped_config_trains_a_step(tmp_path, tiny_model, name):
    cfg = load_config(
        TrainConfig,
        CONFIGS / name,
        [
            f"run.output_dir={tmp_path / 'run'}",
            "run.max_steps=1",
            "run.threads=1",
            "run.progress=false",
            "run.plots=false",
            f"model.path={tiny_model}",
            "rollout.batch_tasks=2",
            "rollout.group_size=2",
            "rollout.max_tokens=8",
            "algorithm.micro_batch_size=4",
            "algorithm.dynamic_sampling=false",  # a random model solves nothing: train anyway
            "eval.at_ends=false",
            "eval.every=0",
        ],
    )
    if cfg.algorithm.uses_critic:  # one round of value pretraining, where the config has it
        cfg.critic.pretrain_steps = min(cfg.critic.pretrain_steps, 1)
    DAPOTrainer(cfg).train()
    (row,) = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    for key in EXPECTED[name]:
        assert key in row, (name, key)
