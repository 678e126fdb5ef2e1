"""The separate critic model (``critic.share_base: false``, ``critic.path``): a causal
LM of its own, read from a local directory, plus the value head; all of its weights
train, the policy's base and adapter do not move on its updates."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY_QWEN

from agentgym import ConfigError, load_config
from agentgym.trainers.algorithm import AlgorithmConfig
from agentgym.trainers.batch import Sample, make_microbatches
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.critic import BACKBONE, CriticConfig
from agentgym.trainers.logging import read_jsonl
from agentgym.trainers.loop import DAPOTrainer
from agentgym.trainers.update import update_critic

#: the critic: a different (smaller) model than the policy, same tokenizer
CRITIC = {**TINY_QWEN, "hidden_size": 16, "intermediate_size": 32}


@pytest.fixture(scope="module")
def critic_dir(tmp_path_factory):
    """A separate critic model on disk, as ``save_pretrained`` writes one."""
    from agentgym.generation import save_model
    from agentgym.trainers.config import ModelConfig
    from agentgym.trainers.models import build_model_and_tokenizer

    model, tok = build_model_and_tokenizer(ModelConfig(preset_overrides=dict(CRITIC)))
    return save_model(model, tok, tmp_path_factory.mktemp("critic") / "model")


def _policy():
    from agentgym.trainers.config import LoraSettings, ModelConfig
    from agentgym.trainers.models import apply_lora, build_model_and_tokenizer

    model, tok = build_model_and_tokenizer(ModelConfig(preset_overrides=dict(TINY_QWEN)))
    return apply_lora(model, LoraSettings(), seed=0), tok


def _learner(model, tok, critic_dir):
    from agentgym.trainers.algorithm import AlgorithmConfig
    from agentgym.trainers.config import OptimConfig
    from agentgym.trainers.learner import Learner

    return Learner(
        model,
        AlgorithmConfig(advantage="gae"),
        OptimConfig(),
        pad_id=tok.pad_token_id,
        critic=CriticConfig(share_base=False, path=str(critic_dir), lr=0.05),
        seed=1,
    )


def test_the_config_names_a_path_for_a_separate_critic():
    with pytest.raises(ConfigError, match=r"needs critic\.path"):
        CriticConfig(share_base=False)
    with pytest.raises(ConfigError, match="share_base: false"):
        CriticConfig(path="somewhere")
    assert CriticConfig(share_base=False, path="somewhere").path == "somewhere"


def test_a_missing_or_foreign_critic_model_is_refused(tmp_path):
    from agentgym.generation import save_model
    from agentgym.trainers.config import ModelConfig
    from agentgym.trainers.models import build_model_and_tokenizer

    model, tok = _policy()
    with pytest.raises(ConfigError, match=r"does not exist"):
        _learner(model, tok, tmp_path / "nothing")
    other, other_tok = build_model_and_tokenizer(ModelConfig(preset_overrides=dict(CRITIC)))
    other.resize_token_embeddings(other.config.vocab_size + 8)  # another vocabulary
    path = save_model(other, other_tok, tmp_path / "foreign")
    with pytest.raises(ConfigError, match="tokenizer"):
        _learner(model, tok, path)


def test_values_come_from_the_critic_model_and_its_update_moves_only_the_critic(critic_dir):
    model, tok = _policy()
    learner = _learner(model, tok, critic_dir)
    critic = learner.critic
    backbone = critic.backbone
    assert backbone is not None and backbone.config.hidden_size == CRITIC["hidden_size"]
    assert critic.head.in_features == CRITIC["hidden_size"]
    names = [n for n, _ in critic.named_parameters()]
    assert any(BACKBONE in n for n in names) and any("value_head" in n for n in names)
    assert not any("lora_" in n for n in names)  # no adapter: the whole model trains
    assert all(p.requires_grad for p in critic.parameters())
    # the policy's adapter state (what the engines sync) holds no critic weights
    assert not any(BACKBONE in k for k in learner.state_dict()["adapter"])

    with torch.no_grad():
        critic.head.weight.normal_(0, 1, generator=torch.Generator().manual_seed(0))
    samples = [
        Sample((5, 6, 7, 8), (9, 10, 11), 0.0, 0, reward=1.0),
        Sample((5, 6, 7, 8), (12, 13), 0.0, 1, reward=0.0),
    ]
    (mb,) = make_microbatches(samples, 4, tok.pad_token_id)
    model.eval()
    with torch.no_grad():
        values = learner._values(mb)
        # the same numbers straight from the critic model's last hidden state
        ids, attention, position_ids = mb.sequences()
        out = backbone(
            input_ids=ids,
            attention_mask=attention,
            position_ids=position_ids,
            output_hidden_states=True,
        )
        direct = critic.values(mb.reply_logits(out.hidden_states[-1]))
    torch.testing.assert_close(values * mb.loss_mask, direct * mb.loss_mask, atol=1e-5, rtol=1e-5)

    params = dict(model.named_parameters())
    before = {n: p.detach().clone() for n, p in params.items()}
    algo = AlgorithmConfig(advantage="gae")
    update_critic(learner, samples, algo, updates=2)  # the critic alone
    changed = {n for n, p in params.items() if not torch.equal(before[n], p.detach())}
    assert any(BACKBONE in n for n in changed) and any("value_head" in n for n in changed)
    assert all(BACKBONE in n or "value_head" in n for n in changed), sorted(changed)[:3]


def _args(tmp_path, critic_dir, *extra: str) -> list[str]:
    """test_critic's tiny VAPO run with the separate critic model."""
    from test_critic import _args as critic_run

    return critic_run(
        tmp_path,
        "algorithm.name=vapo",
        "critic.share_base=false",
        f"critic.path={critic_dir}",
        *extra,
    )


def test_a_run_with_a_separate_critic_trains_it_and_resumes_it(
    tmp_path, toy_envs_registered, critic_dir
):
    args = _args(tmp_path, critic_dir, "critic.pretrain_steps=1", "run.save_every=1")
    trainer = DAPOTrainer(load_config(TrainConfig, None, args))
    params = dict(trainer.model.named_parameters())
    before = {n: p.detach().clone() for n, p in params.items()}
    history = trainer.train()
    changed = {n for n, p in params.items() if not torch.equal(before[n], p.detach())}
    assert any(".default." in n for n in changed), "the policy adapter did not move"
    assert any(BACKBONE in n for n in changed), "the critic model did not move"
    base = {n for n in changed if "lora_" not in n and BACKBONE not in n and "value_head" not in n}
    assert not base, f"the policy's base moved: {sorted(base)[:3]}"
    assert all(m["losses/value"] > 0 and "critic/explained_variance" in m for m in history)
    assert len(read_jsonl(tmp_path / "run" / "critic_pretrain.jsonl")) == 1
    saved = trainer.learner.state_dict()["critic"]
    trainer.close()
    assert any(BACKBONE in k for k in saved)
    resumed = DAPOTrainer(load_config(TrainConfig, None, args), resume=True)
    now = resumed.learner.state_dict()["critic"]
    assert set(now) == set(saved)
    for k in saved:
        torch.testing.assert_close(now[k], saved[k])
    resumed.close()
