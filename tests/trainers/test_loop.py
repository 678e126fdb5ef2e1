"""The all-sync loop: what trains, dynamic sampling, resume, and the CLI."""

from __future__ import annotations

import json
import sys

import pytest
import torch
import yaml
from conftest import TINY_QWEN

from agentgym import load_config
from agentgym.cli import main
from agentgym.errors import ConfigError, UnknownNameError
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.logging import read_jsonl
from agentgym.trainers.loop import DAPOTrainer


def _cfg(tmp_path, *extra: str, name: str = "run") -> TrainConfig:
    return load_config(
        TrainConfig,
        None,
        [
            f"run.output_dir={tmp_path / name}",
            "run.max_steps=2",
            "run.threads=1",
            "run.progress=false",
            "run.plots=false",
            "envs=[{id: agentgym-test/EvenChars-v0}]",
            f"model.preset_overrides={json.dumps(TINY_QWEN)}",
            "rollout.group_size=4",
            "rollout.batch_tasks=2",
            "rollout.max_tokens=10",
            "optim.lr=0.01",
            *extra,
        ],
    )


def test_lora_trains_and_base_stays(tmp_path, toy_envs_registered):
    # two steps: lora_A's gradient is zero until lora_B has left zero in step 1
    trainer = DAPOTrainer(_cfg(tmp_path, "run.max_steps=2", "algorithm.micro_batch_size=3"))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    _, m = trainer.train()
    assert m["charts/groups_kept"] == 2 and m["losses/grad_norm"] > 0
    for n, p in trainer.model.named_parameters():
        moved = not torch.equal(before[n], p.detach())
        assert moved == ("lora_" in n), n
    assert 0.0 <= m["charts/idle_share"] <= 1.0
    assert m["time/generate_s"] > 0 and m["time/train_s"] > 0
    phases = {r["phase"] for r in read_jsonl(tmp_path / "run" / "timeline.jsonl")}
    assert {"rollout", "generate", "reward", "train", "sync"} <= phases


def test_moe_preset_trains_expert_lora(tmp_path, toy_envs_registered):
    cfg = _cfg(tmp_path, "model.preset=tiny-deepseek-v3", "model.preset_overrides={}")
    trainer = DAPOTrainer(cfg)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    after = dict(trainer.model.named_parameters())
    moved = {n for n in before if not torch.equal(before[n], after[n].detach())}
    assert moved == {n for n in before if "lora_" in n}
    # the routed experts' adapters (gate_up_proj and down_proj, A and B) are among them,
    # while the fused expert weights themselves stay put
    assert len([n for n in moved if ".experts." in n]) == 4
    fused = [
        n
        for n in before
        if n.endswith(("experts.base_layer.base_layer.gate_up_proj", "base_layer.down_proj"))
    ]
    assert len(fused) == 2 and not set(fused) & moved


def test_dynamic_sampling_refills_until_the_batch_is_full(tmp_path, toy_envs_registered):
    # only odd seeds give differing rewards: round 1 draws seeds 0, 1 (one kept), round 2
    # draws 2, 3 (one more kept)
    cfg = _cfg(
        tmp_path,
        "run.max_steps=1",
        "envs=[{id: agentgym-test/EvenChars-v0, kwargs: {constant_for_even_seeds: true}}]",
        "rollout.tasks_per_round=2",
    )
    (m,) = DAPOTrainer(cfg).train()
    assert m["charts/generation_rounds"] == 2
    assert m["charts/groups_kept"] == 2
    assert m["charts/groups_filtered"] == 2
    assert m["charts/groups_generated"] == 4
    assert m["charts/hit_round_cap"] == 0


def test_dynamic_sampling_cap_is_reported(tmp_path, toy_envs_registered, capsys):
    env = "envs=[{id: agentgym-test/EvenChars-v0, kwargs: {constant_reward: 0.5}}]"
    cfg = _cfg(tmp_path, "run.max_steps=1", env, "algorithm.max_generation_rounds=3")
    trainer = DAPOTrainer(cfg)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    (m,) = trainer.train()
    assert m["charts/generation_rounds"] == 3
    assert m["charts/hit_round_cap"] == 1 and m["charts/update_skipped"] == 1
    assert "max_generation_rounds" in capsys.readouterr().err
    assert all(torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    strict = _cfg(tmp_path, "run.max_steps=1", env, "algorithm.on_cap=error", name="strict")
    with pytest.raises(ConfigError, match="only 0/2 groups"):
        DAPOTrainer(strict).train()


def test_without_dynamic_sampling_one_round_is_enough(tmp_path, toy_envs_registered):
    env = "envs=[{id: agentgym-test/EvenChars-v0, kwargs: {constant_for_even_seeds: true}}]"
    (m,) = DAPOTrainer(
        _cfg(tmp_path, "run.max_steps=1", env, "algorithm.dynamic_sampling=false")
    ).train()
    assert m["charts/generation_rounds"] == 1 and m["charts/groups_kept"] == 2


def test_resume_gives_the_same_steps_as_an_uninterrupted_run(tmp_path, toy_envs_registered):
    extra = (
        "run.max_steps=3",
        "run.save_every=1",
        "algorithm.updates_per_batch=2",
        "algorithm.kl_coef=0.1",
    )
    full = DAPOTrainer(_cfg(tmp_path, *extra, name="full")).train()
    first = DAPOTrainer(_cfg(tmp_path, *extra, "run.max_steps=2", name="cut")).train()
    assert len(first) == 2
    resumed = DAPOTrainer(_cfg(tmp_path, *extra, name="cut"), resume=True)
    assert resumed.step == 2
    rest = resumed.train()
    assert [m["step"] for m in rest] == [3]
    keys = (
        "charts/reward",
        "losses/total",
        "losses/policy",
        "losses/kl",
        "losses/grad_norm",
        "charts/response_tokens_mean",
    )
    for a, b in zip(full, [*first, *rest], strict=True):
        for k in keys:
            assert b[k] == pytest.approx(a[k], abs=1e-6), (a["step"], k)
    rows = [r for r in read_jsonl(tmp_path / "cut" / "metrics.jsonl") if "charts/reward" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]


def test_full_fine_tuning_resumes_to_the_uninterrupted_run(tmp_path, toy_envs_registered):
    """``lora.enabled=false``: the checkpoint holds the whole model (from the learner's
    state), and a run resumed from step 1 trains the weights of one never stopped."""
    extra = ("run.max_steps=2", "run.save_every=1", "lora.enabled=false")
    full = DAPOTrainer(_cfg(tmp_path, *extra, name="full"))
    full.train()
    DAPOTrainer(_cfg(tmp_path, *extra, "run.max_steps=1", name="cut")).train()
    assert (tmp_path / "cut" / "checkpoints" / "step_000001" / "model").is_dir()
    resumed = DAPOTrainer(_cfg(tmp_path, *extra, name="cut"), resume=True)
    assert resumed.step == 1
    resumed.train()
    for (name, a), b in zip(
        full.model.state_dict().items(), resumed.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


def test_interrupted_checkpoint_write_keeps_the_previous_one(tmp_path, toy_envs_registered):
    from agentgym.generation import latest_checkpoint

    trainer = DAPOTrainer(_cfg(tmp_path, "run.max_steps=1"))
    trainer.train()
    ckpts = tmp_path / "run" / "checkpoints"
    # a crash mid-write leaves a temporary directory; it is never picked up
    (ckpts / ".step_000002.tmp").mkdir()
    (ckpts / ".step_000002.tmp" / "optimizer.pt").write_bytes(b"partial")
    assert latest_checkpoint(ckpts).name == "step_000001"
    again = DAPOTrainer(_cfg(tmp_path, "run.max_steps=1"), resume=True)
    assert again.step == 1


def test_cli_train_smoke(tmp_path, toy_envs_registered):
    cfg_file = tmp_path / "tiny.yaml"
    cfg_file.write_text(
        yaml.safe_dump(
            {
                "run": {"output_dir": str(tmp_path / "cli"), "threads": 1, "progress": False},
                "model": {"preset": "tiny-qwen2", "preset_overrides": TINY_QWEN},
                "envs": [{"id": "agentgym-test/EvenChars-v0", "weight": 1.0}],
                "rollout": {"group_size": 3, "batch_tasks": 2, "max_tokens": 8},
                "eval": {"at_ends": True, "num_tasks": 2},
            }
        )
    )
    assert main(["train", str(cfg_file), "run.max_steps=2"]) == 0
    out = tmp_path / "cli"
    steps = [r for r in read_jsonl(out / "metrics.jsonl") if "charts/reward" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert (out / "checkpoints" / "step_000002" / "adapter" / "adapter_model.safetensors").is_file()
    assert {p.name for p in (out / "plots").iterdir()} == {
        "reward.png",
        "response_length.png",
        "training.png",
        "timeline.png",
    }
    assert "accuracy" in (out / "eval_table.md").read_text()


def test_cli_rejects_unknown_keys_with_a_suggestion(tmp_path, capsys):
    assert main(["train", "rollout.grop_size=4"]) == 2
    assert "rollout.group_size" in capsys.readouterr().err
    assert main(["train", "envs=[{id: NoSuchEnv-v0}]", f"run.output_dir={tmp_path}"]) == 2
    assert "environment id" in capsys.readouterr().err


def test_cli_sft_then_train_from_the_saved_model(tmp_path, toy_envs_registered):
    common = ["run.threads=1", "run.progress=false", "envs=[{id: agentgym-test/EvenChars-v0}]"]
    assert (
        main(
            [
                "sft",
                *common,
                f"run.output_dir={tmp_path / 'sft'}",
                "data.num_tasks=16",
                "train.max_steps=3",
                f"model.preset_overrides={json.dumps(TINY_QWEN)}",
                "max_tokens=8",
                "eval.num_tasks=2",
            ]
        )
        == 0
    )
    model_dir = tmp_path / "sft" / "model"
    assert (model_dir / "model.safetensors").is_file() and (model_dir / "tokenizer.json").is_file()
    assert (
        main(
            [
                "train",
                *common,
                f"run.output_dir={tmp_path / 'rl'}",
                f"model.path={model_dir}",
                "run.max_steps=1",
                "rollout.group_size=2",
                "rollout.batch_tasks=1",
                "rollout.max_tokens=8",
                "run.plots=false",
            ]
        )
        == 0
    )


def test_sft_line_dropout_keeps_the_final_line():
    import random

    from agentgym.trainers.sft import drop_lines

    text = "step one\nstep two\nstep three\nAnswer: 7"
    assert drop_lines(text, 0.0, random.Random(0)) == text
    outs = {drop_lines(text, 0.5, random.Random(s)) for s in range(50)}
    assert all(o.endswith("Answer: 7") for o in outs)
    assert "Answer: 7" in outs and text in outs  # everything dropped / nothing dropped both occur
    kept_lines = [len(o.split("\n")) - 1 for o in outs]
    assert set(kept_lines) == {0, 1, 2, 3}


def test_config_overrides_parse_yaml_values(tmp_path):
    cfg = load_config(
        TrainConfig,
        None,
        ["optim.lr=5e-3", "envs=[{id: a/B-v0, weight: 2}]", "envs.0.kwargs.level=3"],
    )
    assert cfg.optim.lr == 0.005
    assert (
        cfg.envs[0].id == "a/B-v0"
        and cfg.envs[0].weight == 2.0
        and cfg.envs[0].kwargs == {"level": 3}
    )
    with pytest.raises(ConfigError, match="must be an integer"):
        load_config(TrainConfig, None, ["rollout.group_size=many"])
    path = tmp_path / "c.yaml"
    path.write_text("rollout: {group_size: 4}\nalgorithm: {advantge: rloo}\n")
    with pytest.raises(UnknownNameError, match=r"algorithm\.advantage"):
        load_config(TrainConfig, path)


def test_a_colocated_engine_wakes_for_the_rollout_and_sleeps_for_the_update(
    tmp_path, toy_envs_registered
):
    from agentgym.generation import HFEngine

    class RecordingEngine(HFEngine):
        """The HF engine plus a log of when it was asked to sleep and wake."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.events: list[str] = []

        def sleep(self) -> None:
            self.events.append("sleep")

        def wake(self) -> None:
            self.events.append("wake")

        def _generate(self, requests):
            self.events.append("generate")
            return super()._generate(requests)

    cfg = _cfg(tmp_path, "run.max_steps=1")
    trainer = DAPOTrainer(cfg)
    engine = RecordingEngine(trainer.model, trainer.tokenizer, seed=0)
    trainer.engine = engine
    trainer.policy = trainer.steps.policy = engine.as_policy()  # what the step kind calls
    trainer.train()
    events = [
        e
        for i, e in enumerate(engine.events)
        if e != "generate" or engine.events[i - 1] != "generate"
    ]
    assert events == ["wake", "generate", "sleep"]
    phases = {r["phase"] for r in read_jsonl(tmp_path / "run" / "timeline.jsonl")}
    assert {"wake", "sleep"} <= phases


def test_the_vllm_engine_without_vllm_says_how_to_install_it(
    tmp_path, toy_envs_registered, monkeypatch
):
    pytest.importorskip("peft")
    monkeypatch.setitem(sys.modules, "vllm", None)  # as if not installed: `import vllm` fails
    with pytest.raises(ConfigError, match=r"agentgym-toolkit\[vllm\]"):
        DAPOTrainer(_cfg(tmp_path, "rollout.engine=vllm"))


@pytest.mark.slow
def test_env_work_in_ray_workers_gives_the_same_steps(tmp_path, toy_envs_registered):
    pytest.importorskip("ray")
    local = DAPOTrainer(_cfg(tmp_path, "run.max_steps=1", name="local")).train()
    remote = DAPOTrainer(
        _cfg(tmp_path, "run.max_steps=1", "rollout.rollout_workers=1", name="ray")
    ).train()
    for key in (
        "charts/reward",
        "charts/groups_kept",
        "losses/total",
        "charts/response_tokens_mean",
    ):
        assert remote[0][key] == pytest.approx(local[0][key], abs=1e-9), key


def test_ray_address_without_workers_is_a_config_error():
    with pytest.raises(ConfigError, match="rollout_workers"):
        load_config(TrainConfig, None, ["rollout.ray_address=auto"])


@pytest.mark.parametrize("loss", ["ppo", "gspo", "cispo", "reinforce"])
def test_every_loss_trains_from_the_config(tmp_path, toy_envs_registered, loss):
    extra = ["algorithm.eps_low=0.0003", "algorithm.eps_high=0.0004"] if loss == "gspo" else []
    trainer = DAPOTrainer(
        _cfg(tmp_path, "run.max_steps=2", f"algorithm.loss={loss}", "algorithm.tis=token", *extra)
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    history = trainer.train()
    moved = [n for n, p in trainer.model.named_parameters() if "lora_B" in n]
    assert any(not torch.equal(before[n], dict(trainer.model.named_parameters())[n]) for n in moved)
    last = history[-1]
    # the rollout/learner mismatch is measured every step, for the HF engine too
    for key in (
        "charts/logprob_mismatch",
        "charts/logprob_mismatch_max",
        "charts/logprob_mismatch_k3",
    ):
        assert key in last and last[key] >= 0.0
    assert 0.0 <= last["charts/tis_truncated_share"] <= 1.0


def test_the_round_cap_message_is_said_in_full_once(tmp_path, toy_envs_registered, capsys):
    env = "envs=[{id: agentgym-test/EvenChars-v0, kwargs: {constant_reward: 0.5}}]"
    cfg = _cfg(tmp_path, env, "run.max_steps=3", "algorithm.max_generation_rounds=1")
    DAPOTrainer(cfg).train()
    err = capsys.readouterr().err
    assert err.count("Raise algorithm.max_generation_rounds") == 1, err
    assert err.count("dynamic sampling ran out of rounds again") == 2, err
