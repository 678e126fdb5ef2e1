"""T-PPO through the trainer: every sampled token trained once, in the step whose policy
sampled it, with log-probs that agree with the learner's over the continued context;
Extended GAE on the windows the pool cut; the critic trained on ended episodes only; a
run resumed with responses in flight equal to an uninterrupted one; config refusals."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import TINY_QWEN, train_in_processes

from agentgym import ConfigError, load_config
from agentgym.trainers import TrainConfig, read_jsonl
from agentgym.trainers.loop import DAPOTrainer
from agentgym.trainers.tppo import Segment, lag_metrics, segment_samples


def _args(out, *extra: str) -> list[str]:
    return [
        f"run.output_dir={out}",
        "run.threads=1",
        "run.progress=false",
        "run.plots=false",
        "run.save_every=0",
        "health.enabled=false",
        "envs=[{id: agentgym-test/EvenChars-v0}]",
        f"model.preset_overrides={json.dumps(TINY_QWEN)}",
        "rollout.group_size=2",
        "rollout.batch_tasks=2",
        "rollout.max_tokens=10",
        "rollout.truncate_window=4",
        "algorithm.name=tppo",
        "optim.lr=0.01",
        "critic.lr=0.01",
        *extra,
    ]


def test_segments_chain_by_slot_and_only_ended_episodes_carry_a_reward():
    segs = [
        Segment(slot=1, turn=0, prompt_ids=(5, 6, 7), ids=(8, 9), logprobs=(-0.1, -0.2)),
        Segment(slot=0, turn=1, prompt_ids=(1, 2), ids=(3,), logprobs=(-0.3,)),
        Segment(slot=0, turn=0, prompt_ids=(1,), ids=(4, 4), logprobs=(-0.5, -0.6)),
    ]
    out = segment_samples(segs, {0: (0.75, True)})
    assert [(s.episode, s.response_ids) for s in out] == [(0, (4, 4)), (0, (3,)), (1, (8, 9))]
    assert [s.bootstrap for s in out] == [False, False, True]
    assert [s.reward for s in out] == [0.75, 0.75, 0.0]
    assert [s.positive for s in out] == [True, True, False]
    assert out[2].prompt_ids == (5, 6, 7) and out[2].sampler_logprobs == (-0.1, -0.2)


def test_a_cut_window_gets_extended_gae_and_an_ended_one_its_reward():
    """The critic's hook on the samples T-PPO builds: a constant critic gives zero
    advantages on a cut window (no reward, ``V(s_l) := V(s_{l-1})``), and an ended one
    the reward minus the value on every token (lambda 1)."""
    from agentgym.trainers.algorithm import AlgorithmConfig
    from agentgym.trainers.batch import make_microbatches
    from agentgym.trainers.critic import attach_advantages

    segs = [
        Segment(slot=0, turn=0, prompt_ids=(1, 2), ids=(3, 4, 5), logprobs=(0.0,) * 3),
        Segment(slot=1, turn=0, prompt_ids=(1, 2), ids=(6, 7), logprobs=(0.0,) * 2),
    ]
    samples = segment_samples(segs, {1: (1.0, True)})
    algo = AlgorithmConfig(advantage="gae", lam_policy=1.0, lam_critic=1.0, whiten_advantages=False)
    full = [make_microbatches(samples, 8, 0)]
    out, _ = attach_advantages(
        lambda mbs: [torch.full(mb.targets.shape, 0.25) for mb in mbs],
        samples,
        [[0, 1]],
        full,
        algo,
    )
    (mb,) = out[0]
    by_sample = {mb.indices[b]: b for b in range(2)}
    torch.testing.assert_close(mb.token_advantages[by_sample[0], :3], torch.zeros(3))
    torch.testing.assert_close(mb.value_targets[by_sample[0], :3], torch.full((3,), 0.25))
    torch.testing.assert_close(mb.token_advantages[by_sample[1], :2], torch.full((2,), 0.75))


def test_lag_metrics_spread():
    m = lag_metrics([0, 1, 1, 3], max_lag=3)
    assert m["tppo/lag_mean"] == 1.25 and m["tppo/lag_max"] == 3
    assert [m[f"tppo/lag_share_{k}"] for k in range(4)] == [0.25, 0.5, 0.0, 0.25]
    assert lag_metrics([], 3) == {}


def test_every_token_is_trained_once_with_consistent_old_logprobs(tmp_path, toy_envs_registered):
    t = DAPOTrainer(load_config(TrainConfig, None, _args(tmp_path, "run.max_steps=4")))
    try:
        rows = [t.train_step() for _ in range(4)]
        # the critic's own steps do not advance the policy's learning-rate warm-up
        assert t.learner.updates == 4
    finally:
        t.close()
    for m in rows:
        # the window's tokens are the policy's batch: each trained once, when sampled
        assert m["charts/train_tokens"] == m["tppo/window_tokens"] <= 4 * m["tppo/active"]
        # old log-probs: the engine's, over prompt + reply so far, equal the learner's
        assert m["charts/logprob_mismatch_max"] < 1e-4
        assert m["losses/ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert rows[0]["tppo/bootstrapped"] >= 1  # step 1 cut replies: continued in step 2
    assert rows[1]["charts/train_tokens"] > 0
    ended = [m for m in rows if m["tppo/ended"]]
    assert ended, "no episode ended in 4 steps of 4 tokens with a 10-token cap"
    for m in ended:  # the critic learns on the ended episodes' whole replies only
        assert m["tppo/critic_samples"] == m["tppo/ended"]
        assert m["tppo/critic_tokens"] == pytest.approx(
            m["charts/response_tokens_mean"] * m["tppo/ended"]
        )
        assert "losses/value" in m and "critic/explained_variance" in m
    for m in rows:
        if not m["tppo/ended"]:
            assert m["tppo/critic_samples"] == 0 and "losses/value" not in m


@pytest.mark.slow
@pytest.mark.parametrize(
    ("preset", "layout"),
    [
        ("tiny-qwen2", ["distributed.strategy=fsdp2"]),
        ("tiny-deepseek-v3", ["distributed.strategy=fsdp2", "distributed.pp=2"]),
    ],
    ids=["fsdp2", "mesh-pp2"],
)
def test_two_processes_equal_one(tmp_path, toy_envs_registered, preset, layout):
    """T-PPO's windows (continued prompts that no other sample shares, so the ranks'
    micro-batches differ in shape) and its critic steps on ended episodes, in two
    processes: the same episodes, value losses and gradient norms as one process. (ZeRO-3
    trains T-PPO equal to one process too, but one CI run of it aborted at exit after
    its last step, "terminate called without an active exception"; the same abort hit
    the mesh-pp2 case once in a full-suite run. Neither reproduced on demand. The likely
    cause: the run's process groups, held in reference cycles, lived on with their gloo
    threads into the interpreter's exit. ``shutdown`` now frees them first
    (test_distributed's shutdown test); ZeRO-3 stays out of this test to save its time.)"""

    args = [
        a
        for a in _args(tmp_path, "run.max_steps=4", f"model.preset={preset}")
        if not a.startswith(("envs=", "run.output_dir", "model.preset_overrides"))
    ]
    args += ["envs=[{id: 'trainer_toy_envs:agentgym-test/EvenChars-v0'}]"]
    args += ["algorithm.micro_batch_size=3"]
    single = tmp_path / "single"
    DAPOTrainer(load_config(TrainConfig, None, [*args, f"run.output_dir={single}"])).train()
    out = tmp_path / "two"
    train_in_processes([*args, f"run.output_dir={out}", *layout])
    got, want = read_jsonl(out / "metrics.jsonl"), read_jsonl(single / "metrics.jsonl")
    assert len(got) == len(want) == 4
    assert any(b["tppo/ended"] for b in want) and any(b["tppo/bootstrapped"] for b in want)
    for a, b in zip(got, want, strict=True):
        assert (a["tppo/ended"], a["tppo/active"]) == (b["tppo/ended"], b["tppo/active"])
        assert a["losses/grad_norm"] == pytest.approx(b["losses/grad_norm"], rel=1e-5)
        if b["tppo/ended"]:
            assert a["charts/reward"] == pytest.approx(b["charts/reward"], abs=1e-9)
            assert a["losses/value"] == pytest.approx(b["losses/value"], abs=1e-6)


def test_a_resumed_run_with_responses_in_flight_equals_an_uninterrupted_one(
    tmp_path, toy_envs_registered
):
    whole = tmp_path / "whole"
    DAPOTrainer(load_config(TrainConfig, None, _args(whole, "run.max_steps=4"))).train()
    cut = tmp_path / "cut"
    first = DAPOTrainer(load_config(TrainConfig, None, _args(cut, "run.max_steps=2")))
    first.train()
    resumed = DAPOTrainer(
        load_config(TrainConfig, None, _args(cut, "run.max_steps=4")), resume=True
    )
    assert resumed.step == 2
    in_flight = [r for r in resumed.steps.pool.runs.values() if r.replay]
    assert in_flight, "the checkpoint held no response in flight: nothing was tested"
    resumed.train()
    got, want = read_jsonl(cut / "metrics.jsonl"), read_jsonl(whole / "metrics.jsonl")
    assert [r["step"] for r in got] == [r["step"] for r in want] == [1, 2, 3, 4]
    for a, b in zip(got, want, strict=True):
        for key in ("tppo/window_tokens", "tppo/ended", "tppo/critic_tokens", "charts/reward"):
            assert a.get(key) == pytest.approx(b.get(key), nan_ok=True), (a["step"], key)
        assert a["losses/total"] == pytest.approx(b["losses/total"], abs=1e-6), a["step"]


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["rollout.truncate_window=null"], "set rollout.truncate_window"),
        (["algorithm.name=dapo"], "needs a critic"),
        (["algorithm.length_reward_coef=0.1"], "length_reward_coef"),
        (["algorithm.overlong_mask=true"], "overlong_penalty instead"),
        (["rollout.rollout_workers=1"], "rollout.rollout_workers=0"),
    ],
)
def test_settings_tppo_does_not_work_with_are_refused(tmp_path, extra, match):
    with pytest.raises(ConfigError, match=match):
        load_config(TrainConfig, None, _args(tmp_path, *extra))


@pytest.mark.slow
def test_tppo_in_two_processes_matches_one(tmp_path, toy_envs_registered):
    """FSDP2 on two ranks: each plays half the slots, the ranks exchange their steps and
    train on the same batch; the run equals the one-process run, checkpoint included
    (the pool's state gathers both ranks' episodes in flight)."""
    common = [
        *(a for a in _args(tmp_path) if not a.startswith(("envs=", "run.output_dir"))),
        "envs=[{id: 'trainer_toy_envs:agentgym-test/EvenChars-v0'}]",
        "run.max_steps=3",
    ]
    single = tmp_path / "single"
    DAPOTrainer(load_config(TrainConfig, None, [*common, f"run.output_dir={single}"])).train()
    out = tmp_path / "two"
    train_in_processes([*common, f"run.output_dir={out}", "distributed.strategy=fsdp2"])
    got, want = read_jsonl(out / "metrics.jsonl"), read_jsonl(single / "metrics.jsonl")
    assert len(got) == len(want) == 3
    for a, b in zip(got, want, strict=True):
        for key in ("tppo/window_tokens", "tppo/ended", "tppo/critic_tokens"):
            assert a[key] == b[key], (a["step"], key)
        assert a["charts/reward"] == pytest.approx(b["charts/reward"], abs=1e-9, nan_ok=True)
        assert a["losses/total"] == pytest.approx(b["losses/total"], abs=1e-5)
    state = "checkpoints/step_000003/trainer_state.json"
    pool_two = json.loads((out / state).read_text())["tppo_pool"]
    pool_one = json.loads((single / state).read_text())["tppo_pool"]
    assert pool_two == pool_one
