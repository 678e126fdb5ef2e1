"""TRL's ``GRPOTrainer`` trains on agentgym envs through :class:`TRLEnvAdapter`.

Real TRL, a tiny Qwen2 built in process (no downloads), one optimizer step each: on
``agentgym/BalancedMath-v0`` and on a two-conversation env (two act turns with a memory
summary between them), whose episodes reach TRL as one sequence with the environment's
tokens masked out.
"""

from __future__ import annotations

import pytest
import torch
from installed import require

require("trl", reason="pip install 'agentgym[trl]'")
require("datasets", reason="pip install 'agentgym[trl]'")

TINY = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}


#: leave this GRPOConfig field at TRL's default
_DEFAULT = object()


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    torch.set_num_threads(1)
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


def _model():
    from agentgym.generation import build_preset, build_tokenizer

    tok = build_tokenizer()
    return build_preset("tiny-qwen2", tok, overrides=TINY), tok


def _train_one_step(tmp_path, model, tok, adapter, dataset, groups=2, g=2, **config):
    from trl import GRPOConfig, GRPOTrainer

    settings = dict(
        output_dir=str(tmp_path / "trl"),
        num_generations=g,
        per_device_train_batch_size=g * groups,
        max_steps=1,
        max_completion_length=256,
        learning_rate=5e-2,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
    )
    settings.update(config)
    args = GRPOConfig(**{k: v for k, v in settings.items() if v is not _DEFAULT})
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=adapter.reward,
        args=args,
        train_dataset=dataset,
        processing_class=tok,
        rollout_func=adapter.rollout,
    )
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    moved = [n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())]
    logged = next(r for r in trainer.state.log_history if "rewards/agentgym_reward/mean" in r)
    return trainer, moved, logged


def test_grpo_trains_one_step_on_balanced_math(tmp_path):
    from agentgym.trainers.integrations import TRLEnvAdapter

    model, tok = _model()
    adapter = TRLEnvAdapter(
        "agentgym/BalancedMath-v0",
        tok,
        env_kwargs={"kinds": "arithmetic", "levels": 1},
        max_tokens=8,
    )
    dataset = adapter.dataset(range(4))
    assert dataset.column_names == ["prompt", "agentgym_seed"]
    assert dataset[0]["prompt"][-1]["role"] == "user"
    trainer, _, logged = _train_one_step(tmp_path, model, tok, adapter, dataset)
    assert trainer.state.global_step == 1
    episodes = adapter.last_episodes
    assert len(episodes) == 4 and {e.env_id for e in episodes} == {"agentgym/BalancedMath-v0"}
    assert all("correct" in e.reward_breakdown for e in episodes)
    # TRL's reward is the episodes' reward; its completions are the replies' tokens
    assert logged["rewards/agentgym_reward/mean"] == pytest.approx(
        sum(e.reward for e in episodes) / 4, abs=1e-6
    )
    lengths = [len(e.turns[0].completion.token_ids) for e in episodes]
    assert logged["completions/mean_length"] == pytest.approx(sum(lengths) / 4)
    # each task's G samples are one group: two seeds, two episodes each
    assert sorted(e.seed for e in episodes) == sorted(
        [episodes[0].seed] * 2 + [episodes[2].seed] * 2
    )
    adapter.close()


def _register_two_part_even() -> str:
    """TwoPart-v0 (two act turns, a memory summary between them: two conversations),
    scored by the share of even code points in the last reply, so that an untrained
    model's samples get different rewards."""
    import gymnasium as gym
    from trainer_toy_envs import TwoPartEnv

    class TwoPartEvenEnv(TwoPartEnv):
        def _score(self, end_reason):
            share = sum(ord(c) % 2 == 0 for c in self._last) / max(len(self._last), 1)
            return share, {"correct": share > 0.5}

    env_id = "agentgym-test/TwoPartEven-v0"
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=TwoPartEvenEnv, disable_env_checker=True)
    return env_id


def test_grpo_trains_on_a_multi_conversation_env(tmp_path):
    from agentgym.generation import encode_prompt
    from agentgym.trainers.integrations import TRLEnvAdapter

    model, tok = _model()
    adapter = TRLEnvAdapter(_register_two_part_even(), tok, max_tokens=8, seed=1)
    dataset = adapter.dataset(range(2))
    _, moved, logged = _train_one_step(tmp_path, model, tok, adapter, dataset)
    episodes = adapter.last_episodes
    assert all(len(e.turns) == 3 and e.num_conversations == 2 for e in episodes)
    assert [t.kind for t in episodes[0].turns] == ["act", "summary", "act"]
    # the rewards differ within a group, so the step moved the weights
    assert len({e.reward for e in episodes}) > 1 and moved
    assert logged["rewards/agentgym_reward/mean"] == pytest.approx(
        sum(e.reward for e in episodes) / len(episodes), abs=1e-6
    )
    # one sequence per episode: every reply trained, the env's text masked out
    ep = episodes[0]
    row = adapter.episode_row(ep)
    assert row["prompt_ids"] == encode_prompt(tok, ep.turns[0].messages)
    assert len(row["completion_ids"]) == len(row["env_mask"]) == len(row["logprobs"])
    replies = [list(t.completion.token_ids) for t in ep.turns]
    assert sum(row["env_mask"]) == sum(len(r) for r in replies)
    trained = [t for t, m in zip(row["completion_ids"], row["env_mask"], strict=True) if m]
    assert trained == [t for r in replies for t in r]
    adapter.close()


def test_an_episode_becomes_one_sequence_with_the_env_text_masked():
    """With text a tokenizer round-trips, each next prompt of a conversation extends the
    context token by token; the second conversation's prompt is a fresh context."""
    from agentgym import Completion, rollout
    from agentgym.generation import encode_prompt
    from agentgym.trainers.integrations import TRLEnvAdapter

    _, tok = _model()

    async def policy(messages, sampling):
        text = "aaaa" if messages[-1].content.startswith("Part") else "noted: aa"
        ids = [*tok(text, add_special_tokens=False)["input_ids"], tok.eos_token_id]
        return Completion(text=text, token_ids=ids, logprobs=[-0.5] * len(ids))

    env_id = _register_two_part_even()
    adapter = TRLEnvAdapter(env_id, tok)
    (ep,) = rollout(env_id, policy, seeds=[3], env_kwargs=adapter.env_kwargs)
    assert [t.conversation for t in ep.turns] == [0, 0, 1]
    row = adapter.episode_row(ep)
    assert adapter.fresh_contexts == 1  # the new conversation only
    replies = [list(t.completion.token_ids) for t in ep.turns]
    context = row["prompt_ids"] + row["completion_ids"]
    # the summary request extends the first conversation exactly
    summary_prompt = encode_prompt(tok, ep.turns[1].messages)
    assert context[: len(summary_prompt)] == summary_prompt
    gap = len(summary_prompt) - len(row["prompt_ids"]) - len(replies[0])
    assert gap > 0 and row["env_mask"][len(replies[0]) : len(replies[0]) + gap] == [0] * gap
    # the second conversation's whole prompt follows the summary, masked
    second = encode_prompt(tok, ep.turns[2].messages)
    start = len(summary_prompt) - len(row["prompt_ids"]) + len(replies[1])
    assert row["completion_ids"][start : start + len(second)] == second
    assert row["env_mask"][start : start + len(second)] == [0] * len(second)
    assert row["logprobs"][-1] == -0.5 and row["env_mask"][-1] == 1


def test_a_prompt_not_from_the_dataset_is_refused():
    from agentgym import ConfigError
    from agentgym.trainers.integrations import TRLEnvAdapter

    _, tok = _model()
    adapter = TRLEnvAdapter("agentgym/BalancedMath-v0", tok)
    with pytest.raises(ConfigError, match=r"adapter\.dataset"):
        adapter.rollout([[{"role": "user", "content": "hello"}]], trainer=None)


def test_grpo_trains_under_grpo_configs_defaults_bf16_included(tmp_path):
    """GRPOConfig's bf16 (on by default) wraps the model's forward in a bf16 autocast;
    the adapter's generation follows it instead of failing every episode."""
    from agentgym.trainers.integrations import TRLEnvAdapter

    model, tok = _model()
    adapter = TRLEnvAdapter(
        "agentgym/BalancedMath-v0",
        tok,
        env_kwargs={"kinds": "arithmetic", "levels": 1},
        max_tokens=8,
    )
    trainer, _, logged = _train_one_step(
        tmp_path, model, tok, adapter, adapter.dataset(range(4)), bf16=_DEFAULT
    )
    assert trainer.args.bf16 and trainer.accelerator.mixed_precision == "bf16"
    assert trainer.state.global_step == 1
    episodes = adapter.last_episodes
    assert len(episodes) == 4 and not any(e.failed for e in episodes)
    assert all(e.turns[0].completion.token_ids for e in episodes)
    assert logged["rewards/agentgym_reward/mean"] == pytest.approx(
        sum(e.reward for e in episodes) / 4, abs=1e-6
    )
    adapter.close()


def test_a_policy_error_is_raised_with_the_episodes_recorded_failure():
    """The trainer's model failing is an error that names the cause, not an episode
    without turns that TRL cannot read (it was an IndexError)."""
    from types import SimpleNamespace

    from agentgym import PolicyError
    from agentgym.trainers.integrations import TRLEnvAdapter

    model, tok = _model()

    def broken_forward(*args, **kwargs):
        raise RuntimeError("expected m1 and m2 to have the same dtype")

    model.forward = broken_forward
    adapter = TRLEnvAdapter("agentgym/BalancedMath-v0", tok, max_tokens=4)
    dataset = adapter.dataset(range(2))
    trainer = SimpleNamespace(model=model, state=SimpleNamespace(global_step=0))
    with pytest.raises(PolicyError, match=r"policy_error.*same dtype") as err:
        adapter.rollout([dataset[0]["prompt"]] * 2 + [dataset[1]["prompt"]] * 2, trainer)
    assert "4 of 4 episodes" in str(err.value)
    adapter.close()
