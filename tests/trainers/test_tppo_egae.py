"""T-PPO's Extended GAE on tensors small enough to compute by hand, and its equivalence
with PPO's truncated GAE."""

from __future__ import annotations

import pytest
import torch

from agentgym import ConfigError
from agentgym.trainers.algorithm import egae, gae, last_masked

V = torch.tensor([[0.5, 0.6, 0.8]])
M = torch.ones(1, 3)
NO_REWARD = torch.zeros(1, 3)
CUT = torch.tensor([True])


def test_a_cut_sequence_bootstraps_from_its_last_tokens_value():
    # V(s_3) := V(s_2) = 0.8; deltas (gamma 1): 0.6 - 0.5, 0.8 - 0.6, 0.8 - 0.8
    adv, ret = egae(NO_REWARD, V, M, CUT, gamma=1.0, lam=1.0)
    assert adv.tolist()[0] == pytest.approx([0.3, 0.2, 0.0])
    assert ret.tolist()[0] == pytest.approx([0.8, 0.8, 0.8])
    # lambda 0.5: A1 = 0.2, A0 = 0.1 + 0.5 * 0.2
    adv, _ = egae(NO_REWARD, V, M, CUT, gamma=1.0, lam=0.5)
    assert adv.tolist()[0] == pytest.approx([0.2, 0.2, 0.0])


def test_with_discounting_the_last_td_error_is_not_zero():
    # gamma 0.5: delta2 = 0.5 * 0.8 - 0.8 = -0.4, delta1 = 0.4 - 0.6, delta0 = 0.3 - 0.5
    adv, _ = egae(NO_REWARD, V, M, CUT, gamma=0.5, lam=1.0)
    assert adv.tolist()[0] == pytest.approx([-0.4, -0.4, -0.4])


def test_an_ended_sequence_gets_ordinary_gae_with_its_reward():
    r = torch.tensor([[0.0, 0.0, 1.0]])
    adv, ret = egae(r, V, M, torch.tensor([False]), gamma=1.0, lam=1.0)
    assert adv.tolist()[0] == pytest.approx([0.5, 0.4, 0.2])  # as plain GAE
    assert ret.tolist()[0] == pytest.approx([1.0, 1.0, 1.0])


def test_cut_and_ended_rows_in_one_batch_and_padding_is_skipped():
    # row 0 cut with one padding position at the end, row 1 ended with reward 1
    values = torch.tensor([[0.5, 0.6, 0.8, 9.0], [0.5, 0.6, 0.8, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    adv, _ = egae(rewards, values, mask, torch.tensor([True, False]), gamma=1.0, lam=1.0)
    assert adv.tolist()[0] == pytest.approx([0.3, 0.2, 0.0, 0.0])  # 9.0 on padding unused
    assert adv.tolist()[1] == pytest.approx([0.5, 0.4, 0.2, 0.0])
    assert last_masked(values, mask).tolist() == pytest.approx([0.8, 0.8])


@pytest.mark.parametrize("lam", [0.0, 0.6, 0.95, 1.0])
def test_egae_equals_truncated_gae_over_all_but_the_last_token(lam):
    """With gamma 1 and no reward inside the window, EGAE over l tokens is PPO's truncated
    GAE over the first l - 1 tokens bootstrapped from V(s_{l-1}), and 0 on the last."""
    g = torch.Generator().manual_seed(3)
    values = torch.rand(4, 7, generator=g)
    mask = torch.ones(4, 7)
    zeros = torch.zeros(4, 7)
    adv, _ = egae(zeros, values, mask, torch.ones(4, dtype=torch.bool), gamma=1.0, lam=lam)
    head, _ = gae(
        zeros[:, :6], values[:, :6], mask[:, :6], gamma=1.0, lam=lam, last_value=values[:, 6]
    )
    torch.testing.assert_close(adv[:, :6], head)
    assert adv[:, 6].abs().max() == 0


def test_last_value_needs_one_value_per_sequence():
    with pytest.raises(ConfigError, match="one value per sequence"):
        gae(NO_REWARD, V, M, last_value=torch.tensor([1.0, 2.0]))


def test_an_episode_cut_by_the_window_chains_its_turns_and_bootstraps():
    from agentgym.trainers.critic import episode_advantages

    # two turns' tokens this step, values 0.5 0.6 | 0.8; the episode goes on: no reward
    # (the 5.0 is ignored) and V(s_3) := 0.8
    kw = {"gamma": 1.0, "lam_policy": 1.0, "lam_critic": 1.0, "lam_alpha": None}
    adv, tgt = episode_advantages(
        [torch.tensor([0.5, 0.6]), torch.tensor([0.8])], 5.0, bootstrap=True, **kw
    )
    assert [a.tolist() for a in adv] == [pytest.approx([0.3, 0.2]), pytest.approx([0.0])]
    assert torch.cat(tgt).tolist() == pytest.approx([0.8, 0.8, 0.8])
    # the same chain ending its episode credits the reward
    adv, _ = episode_advantages([torch.tensor([0.5, 0.6]), torch.tensor([0.8])], 1.0, **kw)
    assert torch.cat(adv).tolist() == pytest.approx([0.5, 0.4, 0.2])


def test_a_policy_update_that_leaves_the_critic_alone():
    from conftest import TINY_QWEN

    from agentgym.trainers.batch import Sample
    from agentgym.trainers.config import AlgorithmConfig, LoraSettings, ModelConfig, OptimConfig
    from agentgym.trainers.critic import CriticConfig
    from agentgym.trainers.learner import Learner
    from agentgym.trainers.models import apply_lora, build_model_and_tokenizer
    from agentgym.trainers.update import update_critic, update_policy

    torch.set_num_threads(1)
    model, _ = build_model_and_tokenizer(ModelConfig(preset_overrides=dict(TINY_QWEN)))
    model = apply_lora(model, LoraSettings(), seed=0)
    algo = AlgorithmConfig(name="vapo")
    learner = Learner(
        model,
        algo,
        OptimConfig(lr=0.05),
        pad_id=0,
        critic=CriticConfig(),
    )
    samples = [
        Sample((5, 6, 7), (8, 9, 10), 0.0, 0, reward=1.0, bootstrap=True),
        Sample((5, 6, 7), (11, 12), 0.0, 1, reward=1.0),
    ]
    critic = {n: p.detach().clone() for n, p in learner.critic.named_parameters()}
    for _ in range(2):  # lora_B leaves 0 in the first update, lora_A moves in the second
        m = update_policy(learner, samples, algo, temperature=1.0)
    assert "losses/value" not in m and "critic/advantage_mean" in m
    assert all(torch.equal(p, critic[n]) for n, p in learner.critic.named_parameters())
    m = update_critic(learner, samples, algo, updates=None)
    assert m["losses/value"] > 0
    assert any(not torch.equal(p, critic[n]) for n, p in learner.critic.named_parameters())
