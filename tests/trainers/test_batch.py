"""Episodes to training tensors: one advantage per episode, on every policy token."""

from __future__ import annotations

import torch
from conftest import TINY_QWEN

from agentgym.generation import HFEngine, build_preset, encode_prompt
from agentgym.rollouts import rollout
from agentgym.trainers.algorithm import group_advantages
from agentgym.trainers.batch import episodes_to_samples, make_microbatches
from agentgym.types import Completion, Episode, Message, SamplingParams, Turn


def _turn(text: str, ids: tuple[int, ...], conversation: int, kind: str = "act") -> Turn:
    return Turn(
        messages=(Message("user", f"env says {text}"),),
        completion=Completion(text=text, token_ids=ids, logprobs=tuple(-0.5 for _ in ids)),
        kind=kind,
        conversation=conversation,
    )


def test_advantage_reaches_every_turn_of_every_conversation(tokenizer):
    ep0 = Episode(
        "x",
        "t",
        0,
        turns=[
            _turn("a", (10, 11), 0),
            _turn("sum", (12,), 0, "summary"),
            _turn("b", (13, 14, 15), 1),
        ],
        reward=1.0,
    )
    ep1 = Episode("x", "t", 0, turns=[_turn("c", (20,), 0)], reward=0.0, sample=1)
    samples = episodes_to_samples([ep0, ep1], [0.7, -0.7], tokenizer)
    assert [s.advantage for s in samples] == [0.7, 0.7, 0.7, -0.7]
    assert [s.response_ids for s in samples] == [(10, 11), (12,), (13, 14, 15), (20,)]
    assert samples[2].prompt_ids == tuple(encode_prompt(tokenizer, ep0.turns[2].messages))
    for mb in make_microbatches(samples, 3, tokenizer.pad_token_id):
        for row, i in enumerate(mb.indices):
            s = samples[i]
            trained = mb.targets[row][mb.loss_mask[row] > 0].tolist()
            assert trained == list(s.response_ids)  # exactly the sampled tokens, nothing else
            assert mb.advantages[row].item() == torch.tensor(s.advantage).item()
            assert mb.sampler_logprobs[row][mb.loss_mask[row] > 0].tolist() == [-0.5] * len(
                s.response_ids
            )
    # masked (e.g. overlong) episodes contribute nothing
    only = episodes_to_samples([ep0, ep1], [0.7, -0.7], tokenizer, trainable=[False, True])
    assert [s.episode for s in only] == [1]


def test_multi_conversation_rollout_to_samples(tokenizer, toy_envs_registered):
    model = build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN)
    policy = HFEngine(model, tokenizer).as_policy()
    episodes = rollout(
        "agentgym-test/TwoPart-v0",
        policy,
        seeds=[0, 1],
        group_size=3,
        sampling=SamplingParams(max_tokens=8, seed=1),
    )
    policy.close()
    assert all(ep.num_conversations == 2 for ep in episodes)
    assert all([t.kind for t in ep.turns] == ["act", "summary", "act"] for ep in episodes)
    rewards = torch.tensor([ep.reward for ep in episodes])
    gids = torch.tensor([ep.seed for ep in episodes])
    adv = group_advantages(rewards, gids, "grpo").tolist()
    samples = episodes_to_samples(episodes, adv, tokenizer)
    assert len(samples) == sum(len(ep.turns) for ep in episodes)
    for s in samples:
        assert s.advantage == adv[s.episode]
    # every token the policy produced is trained, in every conversation
    assert sum(len(s.response_ids) for s in samples) == sum(ep.num_policy_tokens for ep in episodes)
