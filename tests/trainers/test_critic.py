"""Value-based RL (PPO, VAPO): the critic is a second adapter and a value head on the
policy's frozen base; its values give per-token GAE advantages; it checkpoints and resumes."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import TINY_QWEN, assert_same_critic, train_in_processes

from agentgym import ConfigError, load_config
from agentgym.trainers.batch import Sample, make_microbatches
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.critic import ADAPTER, Critic, CriticConfig, episode_advantages
from agentgym.trainers.logging import read_jsonl
from agentgym.trainers.loop import DAPOTrainer


def _args(tmp_path, *extra: str) -> list[str]:
    return [
        f"run.output_dir={tmp_path / 'run'}",
        "run.max_steps=2",
        "run.threads=1",
        "run.progress=false",
        "run.plots=false",
        "envs=[{id: agentgym-test/EvenChars-v0}]",
        f"model.preset_overrides={json.dumps(TINY_QWEN)}",
        "rollout.group_size=4",
        "rollout.batch_tasks=2",
        "rollout.max_tokens=8",
        "algorithm.max_generation_rounds=1",
        "algorithm.on_cap=train",
        "optim.lr=0.01",
        "critic.lr=0.01",
        *extra,
    ]


def _tiny_peft(tokenizer):
    from agentgym.trainers.config import LoraSettings, ModelConfig
    from agentgym.trainers.models import apply_lora, build_model_and_tokenizer

    model, _ = build_model_and_tokenizer(ModelConfig(preset_overrides=dict(TINY_QWEN)))
    return apply_lora(model, LoraSettings(), seed=0)


def test_presets_set_the_pieces_and_refuse_a_contradiction():
    vapo = load_config(TrainConfig, None, ["algorithm.name=vapo"])
    a = vapo.algorithm
    assert (a.loss, a.advantage, a.lam_critic, a.lam_alpha, a.nll_coef) == (
        "dapo",
        "gae",
        1.0,
        0.05,
        0.1,
    )
    assert a.uses_critic
    ppo = load_config(TrainConfig, None, ["algorithm.name=ppo"]).algorithm
    assert (ppo.loss, ppo.advantage, ppo.lam_policy, ppo.lam_critic) == ("ppo", "gae", 0.95, 0.95)
    assert not load_config(TrainConfig, None, []).algorithm.uses_critic
    with pytest.raises(ConfigError, match=r"algorithm\.name=ppo sets algorithm\.loss='ppo'"):
        load_config(TrainConfig, None, ["algorithm.name=ppo", "algorithm.loss=gspo"])
    with pytest.raises(ConfigError, match=r"algorithm\.name=vapo sets algorithm\.advantage"):
        load_config(TrainConfig, None, ["algorithm.name=vapo", "algorithm.advantage=rloo"])
    # the preset's numbers are tunable defaults: the config's value wins
    tuned = load_config(
        TrainConfig,
        None,
        ["algorithm.name=vapo", "algorithm.lam_alpha=1.0", "algorithm.nll_coef=0"],
    ).algorithm
    assert (tuned.lam_alpha, tuned.lam_critic) == (1.0, 1.0)
    assert tuned.nll_coef == 0.1  # 0 is the field's default: the preset fills it
    with pytest.raises(ConfigError, match=r"lora\.enabled=true"):
        load_config(TrainConfig, None, ["algorithm.name=vapo", "lora.enabled=false"])
    with pytest.raises(ConfigError, match="share_base"):
        CriticConfig(share_base=False)
    # the critic's extra steps leave the policy alone under DeepSpeed too (tested below)
    ds = load_config(
        TrainConfig,
        None,
        ["algorithm.name=ppo", "critic.updates_per_batch=2", "distributed.strategy=deepspeed"],
    )
    assert ds.critic.updates_per_batch == 2


def test_episode_advantages_chain_the_turns_and_credit_the_terminal_reward():
    # two turns, critic says 0 everywhere: with gamma = lambda = 1 every token's
    # advantage and target is the episode's reward
    adv, tgt = episode_advantages(
        [torch.zeros(2), torch.zeros(3)],
        1.0,
        gamma=1.0,
        lam_policy=1.0,
        lam_critic=1.0,
        lam_alpha=None,
    )
    assert [a.tolist() for a in adv] == [[1.0, 1.0], [1.0, 1.0, 1.0]]
    assert [t.tolist() for t in tgt] == [[1.0, 1.0], [1.0, 1.0, 1.0]]
    # lambda = 0: one-step TD; values 0.5 everywhere, the reward on the last token
    adv, tgt = episode_advantages(
        [torch.full((2,), 0.5), torch.full((1,), 0.5)],
        1.0,
        gamma=1.0,
        lam_policy=0.0,
        lam_critic=0.0,
        lam_alpha=None,
    )
    assert torch.cat(adv).tolist() == pytest.approx([0.0, 0.0, 0.5])  # 0.5 + 0 - 0.5, then 1 - 0.5
    assert torch.cat(tgt).tolist() == pytest.approx([0.5, 0.5, 1.0])
    # VAPO's length-adaptive lambda: 1 - 1 / (alpha * 3 tokens) with alpha = 1/3 is 0
    adv_a, _ = episode_advantages(
        [torch.full((2,), 0.5), torch.full((1,), 0.5)],
        1.0,
        gamma=1.0,
        lam_policy=0.9,
        lam_critic=1.0,
        lam_alpha=1 / 3,
    )
    assert torch.cat(adv_a).tolist() == pytest.approx([0.0, 0.0, 0.5])


def _learner(model, tokenizer, *, share: bool = True, **algo: object):
    from agentgym.trainers.algorithm import AlgorithmConfig
    from agentgym.trainers.config import OptimConfig
    from agentgym.trainers.learner import Learner

    return Learner(
        model,
        AlgorithmConfig(advantage="gae", share_prompts=share, **algo),
        OptimConfig(),
        pad_id=tokenizer.pad_token_id,
        critic=CriticConfig(r=4),
        seed=1,
    )


def test_the_critic_is_a_second_adapter_with_a_zero_head(tokenizer):
    model = _tiny_peft(tokenizer)
    policy_before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    learner = _learner(model, tokenizer)
    critic = learner.critic
    assert isinstance(critic, Critic)
    names = [n for n, _ in critic.named_parameters()]
    assert any(f".{ADAPTER}." in n for n in names) and any("value_head" in n for n in names)
    assert not any(".default." in n for n in names)
    # the policy's adapter is untouched and still the active, trainable one
    assert model.active_adapter == "default"
    for n, p in model.named_parameters():
        if n in policy_before:
            assert torch.equal(p, policy_before[n]) and p.requires_grad
    # the value head starts at 0: every value is 0 until the critic trains
    s = Sample((5, 6, 7), (8, 9), 0.0, 0, reward=1.0)
    mb = make_microbatches([s], 4, 0)[0]
    with critic.active():
        assert model.active_adapter == ADAPTER
    assert model.active_adapter == "default"
    assert torch.equal(learner._values(mb), torch.zeros(1, 2))
    assert model.active_adapter == "default"
    # a state dict round-trips, and refuses another critic's shape
    state = critic.state_dict()
    with torch.no_grad():
        critic.head.weight.fill_(3.0)
    critic.load_state_dict(state)
    assert torch.equal(critic.head.weight, torch.zeros_like(critic.head.weight))
    with pytest.raises(ConfigError, match="does not fit"):
        critic.load_state_dict({k: v for k, v in state.items() if "value_head" not in k})


def test_shared_prompt_values_equal_the_plain_layout(tokenizer):
    """The critic's pass shares each prompt among its samples like the policy's: the
    values (and their gradients) are those of one full row per sample."""
    samples = [
        Sample((5, 6, 7, 8), tuple(range(9, 9 + n)), 0.0, i, reward=1.0)
        for i, n in enumerate((3, 1, 4, 2))
    ] + [Sample((20, 21), (22, 23), 0.0, 4)]
    out = {}
    for share in (True, False):
        model = _tiny_peft(tokenizer)
        learner = _learner(model, tokenizer, share=share)
        with torch.no_grad():
            learner.critic.head.weight.normal_(0, 1, generator=torch.Generator().manual_seed(0))
        (mb,) = make_microbatches(samples, 8, tokenizer.pad_token_id)
        assert mb.num_prompts == 2
        values = learner._values(mb)
        (values * mb.loss_mask).sum().backward()
        grads = {
            n: p.grad.clone() for n, p in learner.critic.named_parameters() if p.grad is not None
        }
        out[share] = (values * mb.loss_mask, grads)
    torch.testing.assert_close(out[True][0], out[False][0], atol=1e-5, rtol=1e-5)
    assert out[True][1].keys() == out[False][1].keys() and len(out[True][1]) > 2
    for n in out[True][1]:
        torch.testing.assert_close(out[True][1][n], out[False][1][n], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("preset", ["vapo", "ppo"])
def test_a_value_based_run_trains_both_adapters_and_not_the_base(
    tmp_path, toy_envs_registered, preset
):
    cfg = load_config(
        TrainConfig,
        None,
        _args(tmp_path, f"algorithm.name={preset}", "critic.pretrain_steps=2"),
    )
    trainer = DAPOTrainer(cfg)
    params = dict(trainer.model.named_parameters())
    before = {n: p.detach().clone() for n, p in params.items()}
    history = trainer.train()
    changed = {n for n, p in params.items() if not torch.equal(before[n], p.detach())}
    assert any(".default." in n for n in changed), "the policy adapter did not move"
    assert any(f".{ADAPTER}." in n for n in changed), "the critic adapter did not move"
    assert any("value_head" in n for n in changed), "the value head did not move"
    assert not any("lora_" not in n and "value_head" not in n for n in changed), "base moved"
    for m in history:
        assert m["losses/value"] > 0 and "critic/explained_variance" in m
        assert "charts/update_skipped" in m
    if preset == "vapo":
        assert all("losses/nll_positive" in m for m in history)
    pre = read_jsonl(tmp_path / "run" / "critic_pretrain.jsonl")
    assert 1 <= len(pre) <= 2 and all(r["losses/value"] > 0 for r in pre)
    # value pretraining left the policy's learning-rate warm-up alone
    assert trainer.learner.updates == 2


def test_value_pretraining_trains_only_the_critic(tmp_path, toy_envs_registered, capsys):

    cfg = load_config(
        TrainConfig,
        None,
        _args(
            tmp_path,
            "algorithm.name=vapo",
            "critic.pretrain_steps=3",
            "critic.pretrain_explained_variance=2.0",  # never reached: all 3 rounds run
        ),
    )
    trainer = DAPOTrainer(cfg)
    params = dict(trainer.model.named_parameters())
    before = {n: p.detach().clone() for n, p in params.items()}
    rows = trainer.pretrain_critic()
    assert [r["pretrain_step"] for r in rows] == [1, 2, 3]
    said = capsys.readouterr().err  # a person waiting sees what runs, before it runs
    assert said.index("value pretraining: up to 3 round(s)") < said.index("3 round(s), explained")
    changed = {n for n, p in params.items() if not torch.equal(before[n], p.detach())}
    assert changed and all(f".{ADAPTER}." in n or "value_head" in n for n in changed)
    trainer.close()


def test_a_resumed_value_based_run_restores_the_critic(tmp_path, toy_envs_registered):
    args = _args(tmp_path, "algorithm.name=vapo", "run.save_every=1")
    first = DAPOTrainer(load_config(TrainConfig, None, args))
    first.train()
    saved = first.learner.state_dict()["critic"]
    first.close()
    assert (tmp_path / "run" / "checkpoints" / "step_000002" / "critic.safetensors").is_file()
    resumed = DAPOTrainer(load_config(TrainConfig, None, args), resume=True)
    assert resumed.step == 2
    now = resumed.learner.state_dict()["critic"]
    assert set(now) == set(saved)
    assert all(torch.equal(now[k], saved[k]) for k in saved)
    resumed.close()
    # a run written without a critic cannot be resumed as one
    plain = _args(tmp_path / "plain", "run.save_every=1")
    DAPOTrainer(load_config(TrainConfig, None, plain)).train()
    with pytest.raises(ConfigError, match=r"critic\.safetensors is missing"):
        DAPOTrainer(load_config(TrainConfig, None, [*plain, "algorithm.name=vapo"]), resume=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    "strategy", ["fsdp2", "deepspeed-3", "deepspeed-2", "fsdp2+model", "deepspeed-3+model"]
)
def test_vapo_in_two_processes_matches_one(tmp_path, toy_envs_registered, strategy):
    """FSDP2, ZeRO-3 and ZeRO-2: value pretraining, the critic's values, GAE and both
    updates (with a critic-only extra step) on two ranks equal the one-process run (every
    rank values the whole batch; the critic's head is sharded).

    It pins three things DeepSpeed got wrong before: the critic's gradient norm passes
    ``optim.max_grad_norm`` (0.2 here; each group must be clipped by its own norm, not
    the joint one); critic-only steps must leave the policy's optimizer state alone (ZeRO steps
    every group); and ZeRO-3 must not add the previous step's gradient to a parameter
    that had none in the first backward pass (the policy's, after the critic's pass).
    ``+model``: the critic is a separate model (``critic.share_base: false``)."""
    from pathlib import Path

    from safetensors.torch import load_file

    env = "envs=[{id: 'trainer_toy_envs:agentgym-test/EvenChars-v0'}]"
    common = [
        *(a for a in _args(tmp_path) if not a.startswith(("envs=", "run.output_dir"))),
        env,
        "algorithm.name=vapo",
        "algorithm.micro_batch_size=3",
        "critic.pretrain_steps=1",
        "critic.updates_per_batch=2",
        "optim.max_grad_norm=0.2",
        "run.save_every=2",
    ]
    strategy, separate, _ = strategy.partition("+model")
    if separate:
        from agentgym.generation import save_model
        from agentgym.trainers.config import ModelConfig
        from agentgym.trainers.models import build_model_and_tokenizer

        small = {
            **TINY_QWEN,
            "hidden_size": 16,
            "intermediate_size": 32,
            "tie_word_embeddings": False,
        }
        critic, tok = build_model_and_tokenizer(ModelConfig(preset_overrides=small))
        path = save_model(critic, tok, tmp_path / "critic")
        common += ["critic.share_base=false", f"critic.path={path}"]
    single = tmp_path / "single"
    DAPOTrainer(load_config(TrainConfig, None, [*common, f"run.output_dir={single}"])).train()
    out = tmp_path / "two"
    name, _, stage = strategy.partition("-")
    train_in_processes(
        [
            *common,
            f"run.output_dir={out}",
            f"distributed.strategy={name}",
            *([f"distributed.zero_stage={stage}"] if stage else []),
        ]
    )
    assert_same_critic(out, single, steps=(2,), rel=1e-3)
    rows = zip(read_jsonl(out / "metrics.jsonl"), read_jsonl(single / "metrics.jsonl"), strict=True)
    for a, b in rows:
        assert a["charts/reward"] == pytest.approx(b["charts/reward"], abs=1e-9)
        assert a["losses/total"] == pytest.approx(b["losses/total"], abs=1e-5)
        assert a["losses/grad_norm"] == pytest.approx(b["losses/grad_norm"], rel=1e-3)
    adapter = Path("checkpoints") / "step_000002" / "adapter" / "adapter_model.safetensors"
    a, b = load_file(str(out / adapter)), load_file(str(single / adapter))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-4, rtol=1e-4, msg=k)


def test_each_conversation_is_valued_from_what_it_sees_and_the_reward_crosses_them(
    tokenizer, toy_envs_registered
):
    """A new conversation is a new state: its turns are valued from their own context
    (the task and the memory summary), and GAE still credits the one terminal reward to
    every token of every conversation."""
    from agentgym.generation import HFEngine
    from agentgym.rollouts import rollout
    from agentgym.trainers.algorithm import AlgorithmConfig
    from agentgym.trainers.batch import episodes_to_samples
    from agentgym.trainers.critic import attach_advantages
    from agentgym.types import SamplingParams

    model = _tiny_peft(tokenizer)
    learner = _learner(model, tokenizer)
    critic = learner.critic
    with torch.no_grad():  # a critic with an opinion: values differ by token
        critic.head.weight.normal_(0, 0.5)
        critic.head.bias.fill_(0.1)
    policy = HFEngine(model, tokenizer).as_policy()
    episodes = rollout(
        "agentgym-test/TwoPart-v0",
        policy,
        seeds=[0],
        group_size=2,
        sampling=SamplingParams(max_tokens=6, seed=3),
    )
    policy.close()
    ep = episodes[0]
    assert [t.conversation for t in ep.turns] == [0, 0, 1]
    first_reply = ep.turns[0].completion.text
    if first_reply.strip():  # the new conversation holds the summary, not the first turn
        assert first_reply not in "".join(m.content for m in ep.turns[2].messages)
    samples = episodes_to_samples(
        episodes, [0.0] * len(episodes), tokenizer, rewards=[1.0, 0.0], positive=[True, False]
    )
    algo = AlgorithmConfig(
        advantage="gae", gamma=1.0, lam_policy=1.0, lam_critic=1.0, whiten_advantages=False
    )
    minis = [list(range(len(samples)))]
    full = [make_microbatches(samples, 2, tokenizer.pad_token_id)]
    model.eval()
    out, stats = attach_advantages(
        lambda mbs: learner.forward(mbs, lambda mb, v: v, output="values"),
        samples,
        minis,
        full,
        algo,
    )
    by_sample = {}
    for mb in out[0]:
        for row, i in enumerate(mb.indices):
            n = len(samples[i].response_ids)
            by_sample[i] = (mb.old_values[row, :n], mb.token_advantages[row, :n])
    for i, s in enumerate(samples):
        # valued alone, from its own prompt: the same values as in the batch
        alone = make_microbatches([s], 1, tokenizer.pad_token_id)[0]
        with torch.no_grad():
            v = learner._values(alone)[0, : len(s.response_ids)]
        torch.testing.assert_close(by_sample[i][0], v, atol=1e-5, rtol=1e-5)
        # gamma = lambda = 1: every token's advantage is the episode's reward minus its value
        torch.testing.assert_close(
            by_sample[i][1], torch.full_like(v, s.reward) - v, atol=1e-5, rtol=1e-5
        )
    assert {s.reward for s in samples if s.episode == 0} == {1.0}
    assert stats["critic/value_mean"] != 0.0


def test_whitened_advantages_are_the_raw_ones_shifted_and_scaled_over_the_batch():
    """``algorithm.whiten_advantages`` (on by default): the batch's token advantages get
    mean 0 and std 1 over all its tokens, whichever sample they sit in; the order of the
    advantages and the value targets are those of raw GAE."""
    from agentgym.trainers.algorithm import AlgorithmConfig
    from agentgym.trainers.critic import attach_advantages, whiten

    raw = {0: torch.tensor([1.0, 2.0]), 1: torch.tensor([3.0, 4.0, 5.0])}
    out = whiten(raw)
    flat = torch.cat([out[0], out[1]])
    # mean 3, unbiased std sqrt(2.5)
    torch.testing.assert_close(flat, (torch.arange(1.0, 6.0) - 3.0) / 2.5**0.5)
    assert whiten({0: torch.tensor([0.7])})[0].item() == pytest.approx(0.7)  # too few tokens

    samples = [
        Sample((1, 2), (3, 4, 5), 0.0, episode=0, reward=1.0),
        Sample((1, 2), (6, 7), 0.0, episode=1, reward=0.0),
    ]
    full = [make_microbatches(samples, 8, 0)]

    def run(**kw: object) -> tuple[torch.Tensor, torch.Tensor]:
        algo = AlgorithmConfig(advantage="gae", lam_policy=1.0, lam_critic=1.0, **kw)
        out, stats = attach_advantages(
            lambda mbs: [torch.full(mb.targets.shape, 0.25) for mb in mbs],
            samples,
            [[0, 1]],
            full,
            algo,
        )
        (mb,) = out[0]
        rows = {mb.indices[b]: b for b in range(2)}
        adv = torch.cat([mb.token_advantages[rows[0], :3], mb.token_advantages[rows[1], :2]])
        tgt = torch.cat([mb.value_targets[rows[0], :3], mb.value_targets[rows[1], :2]])
        assert stats["critic/advantage_std"] > 0  # the raw advantages' statistics
        return adv, tgt

    raw_adv, raw_tgt = run(whiten_advantages=False)
    torch.testing.assert_close(raw_adv, torch.tensor([0.75] * 3 + [-0.25] * 2))
    adv, tgt = run()
    assert float(adv.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(adv.std()) == pytest.approx(1.0, abs=1e-5)
    torch.testing.assert_close(adv, (raw_adv - raw_adv.mean()) / raw_adv.std())
    torch.testing.assert_close(tgt, raw_tgt)  # the critic's targets are not whitened
