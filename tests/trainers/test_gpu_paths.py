"""GPU paths: device and precision plumbing, host copies, collectives, checkpoints.

The CPU tests check every piece of logic that decides where a tensor lives or what a
GPU run is handed: ``model.device`` / ``model.dtype``, bf16 training and rollouts end to
end on CPU (one process and two), host copies of the adapter, the device of a cross-rank
sum, the CUDA RNG state in checkpoints, the HF engine's noise on the scores' device.
What the vLLM engine is told is in ``test_gpu_paths_vllm.py``. The ``gpu`` tests at the end are
the smoke set a person with a GPU runs in one command (docs/trainer.md, "Running on
GPUs")::

    .venv/bin/python -m pytest -q -m gpu tests/trainers/test_gpu_paths.py
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
import torch
from conftest import TINY_QWEN

from agentgym import ConfigError, load_config
from agentgym.generation import build_preset, place_model, resolve_device, resolve_dtype
from agentgym.trainers.algorithm import selected_logprobs
from agentgym.trainers.batch import Sample
from agentgym.trainers.config import (
    AlgorithmConfig,
    LoraSettings,
    ModelConfig,
    OptimConfig,
    TrainConfig,
)
from agentgym.trainers.critic import CriticConfig
from agentgym.trainers.device import compute_dtype, host_copy
from agentgym.trainers.distributed import DistInfo, all_reduce_sum
from agentgym.trainers.learner import Learner
from agentgym.trainers.loop import DAPOTrainer
from agentgym.trainers.models import apply_lora
from agentgym.trainers.update import update_policy

ROOT = Path(__file__).resolve().parents[2]
PRESETS = [("tiny-qwen2", TINY_QWEN), ("tiny-deepseek-v3", {})]


def _cfg(tmp_path: Path, *extra: str, name: str = "run") -> TrainConfig:
    return load_config(
        TrainConfig,
        None,
        [
            f"run.output_dir={tmp_path / name}",
            "run.max_steps=2",
            "run.save_every=1",
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


def _samples(vocab: int) -> list[Sample]:
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(6):
        prompt = tuple(int(t) for t in torch.randint(4, vocab, (5 + i,), generator=g))
        reply = tuple(int(t) for t in torch.randint(4, vocab, (3 + i % 3,), generator=g))
        out.append(Sample(prompt, reply, (-1.0) ** i, i))
    return out


# ------------------------------------------------------------------ model.device


def test_device_auto_is_the_cpu_without_cuda_and_named_settings_are_checked(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu", "gloo") == torch.device("cpu")
    with pytest.raises(ConfigError, match=r"model\.device=cpu"):
        resolve_device("cuda")
    with pytest.raises(ConfigError, match=r"distributed\.backend=gloo"):
        resolve_device("cpu", "nccl")
    with pytest.raises(ConfigError, match=r"model\.device must be"):
        ModelConfig(device="gpu")
    with pytest.raises(ConfigError, match="float16 would need loss scaling"):
        ModelConfig(dtype="float16")


def test_device_auto_takes_the_local_ranks_gpu_when_cuda_is_present(monkeypatch):
    """The rule on a GPU machine, with torch's CUDA queries answering as on a 2-GPU node
    (the choice is agentgym's; only the hardware is simulated)."""
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert resolve_device("auto", "nccl") == torch.device("cuda", 1)
    assert resolve_device("cuda", "nccl") == torch.device("cuda", 1)
    assert chosen == [1, 1]  # the chosen GPU becomes the current one
    assert resolve_device("auto", "gloo") == torch.device("cpu")  # gloo trains on CPU
    with pytest.raises(ConfigError, match=r"use model\.device=cuda"):
        resolve_device("cuda:0", "nccl")  # one GPU named for two processes
    with pytest.raises(ConfigError, match=r"distributed\.backend=nccl"):
        resolve_device("cuda", "gloo")
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(ConfigError, match="torch sees 2"):
        resolve_device("auto", "nccl")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert DistInfo(backend="nccl", local_rank=3).device == torch.device("cuda", 3)


def test_dtype_auto_is_float32_on_cpu_and_place_model_keeps_buffers(tokenizer):
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    model = build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN)
    place_model(model, ModelConfig(device="cpu", dtype="bfloat16"))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    # rotary frequencies keep float32 (bf16 would round the positions' angles)
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32


# ------------------------------------------------------------------ mixed precision


@pytest.mark.parametrize(("preset", "overrides"), PRESETS)
def test_bf16_base_trains_float32_master_weights_under_autocast(tokenizer, preset, overrides):
    base = build_preset(preset, tokenizer, overrides=overrides, seed=3)
    place_model(base, ModelConfig(device="cpu", dtype="bfloat16"))
    model = apply_lora(base, LoraSettings(r=4), seed=5)
    learner = Learner(
        model,
        AlgorithmConfig(micro_batch_size=4),
        OptimConfig(lr=1e-2),
        pad_id=tokenizer.pad_token_id,
    )
    assert learner.compute_dtype == torch.bfloat16
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    frozen = {n: p for n, p in model.named_parameters() if not p.requires_grad}
    assert trainable and {p.dtype for p in trainable.values()} == {torch.float32}
    assert {p.dtype for p in frozen.values() if p.is_floating_point()} == {torch.bfloat16}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for _ in range(2):  # lora_A's gradient is zero until lora_B has moved
        m = update_policy(learner, _samples(len(tokenizer)), AlgorithmConfig(), temperature=1.0)
    assert torch.isfinite(torch.tensor(m["losses/total"])) and m["losses/grad_norm"] > 0
    moved = {n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())}
    assert moved and moved <= set(trainable)
    assert {p.dtype for p in model.parameters() if p.requires_grad} == {torch.float32}


def test_a_critic_on_a_bf16_base_keeps_float32_head_and_adapter(tokenizer):
    base = build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN)
    place_model(base, ModelConfig(device="cpu", dtype="bfloat16"))
    learner = Learner(
        apply_lora(base, LoraSettings(r=4)),
        AlgorithmConfig(advantage="gae"),
        OptimConfig(),
        pad_id=tokenizer.pad_token_id,
        critic=CriticConfig(),
    )
    assert learner.critic is not None
    assert {p.dtype for p in learner.critic.parameters()} == {torch.float32}


def test_full_fine_tuning_in_bf16_keeps_every_weight_in_float32(tokenizer):
    model = build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN)
    place_model(model, ModelConfig(device="cpu", dtype="bfloat16"))
    learner = Learner(
        model,
        AlgorithmConfig(micro_batch_size=4),
        OptimConfig(lr=1e-3),
        pad_id=tokenizer.pad_token_id,
        lora=False,
    )
    assert learner.compute_dtype == torch.bfloat16  # the autocast dtype it was placed in
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert compute_dtype(model) is None
    update_policy(learner, _samples(len(tokenizer)), AlgorithmConfig(), temperature=1.0)


def test_bf16_logprobs_stay_close_to_float32(tokenizer):
    """The same adapter under bf16 autocast and in float32 gives log-probs a bf16 rounding
    apart: autocast computes the same function, in lower precision."""
    out = {}
    for dtype in ("float32", "bfloat16"):
        base = build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN, seed=3)
        place_model(base, ModelConfig(device="cpu", dtype=dtype))
        learner = Learner(
            apply_lora(base, LoraSettings(r=4), seed=5),
            AlgorithmConfig(micro_batch_size=8),
            OptimConfig(),
            pad_id=tokenizer.pad_token_id,
        )
        from agentgym.trainers.batch import make_microbatches

        mbs = make_microbatches(_samples(len(tokenizer)), 8, tokenizer.pad_token_id)
        logp = learner.forward(mbs, lambda mb, lg: selected_logprobs(lg, mb.targets, 1.0))
        out[dtype] = torch.cat([lp.flatten() for lp in logp])
    gap = (out["float32"] - out["bfloat16"]).abs().max()
    assert 0 < gap < 0.1


def test_training_and_rollouts_in_bf16_end_to_end(tmp_path, toy_envs_registered):
    trainer = DAPOTrainer(_cfg(tmp_path, "model.dtype=bfloat16", "model.device=cpu"))
    base = [p for n, p in trainer.model.named_parameters() if "lora_" not in n]
    assert {p.dtype for p in base} == {torch.bfloat16}
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    _, m = trainer.train()
    assert m["losses/grad_norm"] > 0 and m["charts/logprob_mismatch"] < 0.1
    for n, p in trainer.model.named_parameters():
        assert (not torch.equal(before[n], p.detach())) == ("lora_" in n), n
    trainer.close()
    # the checkpoint's adapter is the float32 master copy; a resume reads it back
    ckpt = tmp_path / "run" / "checkpoints" / "step_000002" / "adapter"
    from safetensors.torch import load_file

    saved = load_file(str(ckpt / "adapter_model.safetensors"))
    assert {v.dtype for v in saved.values()} == {torch.float32}
    again = DAPOTrainer(
        _cfg(tmp_path, "model.dtype=bfloat16", "model.device=cpu", "run.max_steps=3"), resume=True
    )
    assert again.step == 2
    state = again.learner.state_dict()["adapter"]
    for k, v in saved.items():
        assert torch.equal(state[k], v), k
    again.close()


def test_ppo_critic_trains_in_bf16(tmp_path, toy_envs_registered):
    """The critic's adapter and value head (float32 master weights on a bf16 base) train
    end to end; its values come out in float32."""
    trainer = DAPOTrainer(
        _cfg(tmp_path, "model.dtype=bfloat16", "algorithm.name=ppo", "run.save_every=0")
    )
    critic = trainer.learner.critic
    assert critic is not None
    before = {n: p.detach().clone() for n, p in critic.named_parameters()}
    _, m = trainer.train()
    assert m["losses/value"] > 0 and {p.dtype for p in critic.parameters()} == {torch.float32}
    assert any(not torch.equal(before[n], p.detach()) for n, p in critic.named_parameters())
    trainer.close()


def test_moe_expert_lora_trains_in_bf16(tmp_path, toy_envs_registered):
    cfg = _cfg(
        tmp_path,
        "model.preset=tiny-deepseek-v3",
        "model.preset_overrides={}",
        "model.dtype=bfloat16",
        "run.max_steps=2",
        "run.save_every=0",
    )
    trainer = DAPOTrainer(cfg)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    moved = {
        n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p.detach())
    }
    assert moved == {n for n in before if "lora_" in n}
    assert [n for n in moved if ".experts." in n]
    trainer.close()


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["fsdp2", "deepspeed"])
def test_two_processes_with_a_bf16_base_match_one(tmp_path, toy_envs_registered, strategy):
    """The sharded strategies keep the learner's bf16 base, autocast and float32 master
    weights: the adapter after two steps equals the single process's, bit for bit. (On
    CPU DeepSpeed's forward leaves the outer autocast on whatever its config says, since
    it asks CUDA's autocast state only; the config itself is checked below.)"""
    import os
    import subprocess

    from safetensors.torch import load_file

    # ZeRO-3 and FSDP2 run one full sequence per sample (their learners): the single run too
    layout = ["algorithm.share_prompts=false"]
    args = [
        "run.max_steps=2",
        "run.save_every=1",
        "run.threads=1",
        "run.progress=false",
        "run.plots=false",
        f"model.preset_overrides={json.dumps(TINY_QWEN)}",
        "rollout.group_size=4",
        "rollout.batch_tasks=2",
        "rollout.max_tokens=10",
        "algorithm.micro_batch_size=3",
        "optim.lr=0.01",
        "model.dtype=bfloat16",
        *layout,
    ]
    single = DAPOTrainer(
        load_config(
            TrainConfig,
            None,
            [
                f"run.output_dir={tmp_path / 'one'}",
                "envs=[{id: agentgym-test/EvenChars-v0}]",
                *args,
            ],
        )
    )
    single.train()
    single.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests" / "helpers")}
    cmd = [
        *(sys.executable, "-m", "agentgym", "train", f"run.output_dir={tmp_path / 'two'}"),
        "envs=[{id: 'trainer_toy_envs:agentgym-test/EvenChars-v0'}]",
        *(*args, f"distributed.strategy={strategy}", "--nproc", "2"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    name = "checkpoints/step_000002/adapter/adapter_model.safetensors"
    one, two = load_file(str(tmp_path / "one" / name)), load_file(str(tmp_path / "two" / name))
    assert one.keys() == two.keys() and {v.dtype for v in two.values()} == {torch.float32}
    for k in one:
        torch.testing.assert_close(two[k], one[k], rtol=0, atol=1e-6, msg=k)


@pytest.mark.parametrize("dtype", [torch.bfloat16, None])
def test_deepspeed_is_told_the_learners_autocast(monkeypatch, dtype):
    """DeepSpeed's forward switches an outer CUDA autocast off unless its config's
    ``torch_autocast`` asks for it: the config says what the learner uses, read by
    DeepSpeed's own config readers, and marks no module for bf16 gradient reduction."""
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    from deepspeed.runtime import config as ds

    from agentgym.trainers.strategies import deepspeed_config

    cfg = deepspeed_config(
        micro_batch_size=3, world_size=2, max_grad_norm=1.0, zero_stage=3, compute_dtype=dtype
    )
    assert ds.get_torch_autocast_enabled(cfg) == (dtype is not None)
    if dtype is not None:
        assert ds.get_torch_autocast_dtype(cfg) == dtype
        assert ds.get_lower_precision_safe_modules(cfg) == []


# ------------------------------------------------------------------ host copies


def test_adapter_state_is_a_host_copy(tokenizer):
    model = apply_lora(build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN), LoraSettings())
    learner = Learner(model, AlgorithmConfig(), OptimConfig(), pad_id=tokenizer.pad_token_id)
    state = learner.state_dict()["adapter"]
    params = {p.data_ptr() for p in model.parameters()}
    assert state and all(v.device.type == "cpu" for v in state.values())
    assert not {v.data_ptr() for v in state.values()} & params  # copies, not the weights
    assert host_copy({"x": torch.ones(2)})["x"].device.type == "cpu"


def _numpy_without_cpu(path: Path, root: Path = ROOT) -> list[str]:
    """``.numpy()`` calls on a chain with no ``.cpu()`` / ``.to("cpu")`` / ``.tolist()``
    before them: a crash on a CUDA tensor."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "numpy"
        ):
            continue
        chain, safe = node.func.value, False
        while isinstance(chain, ast.Call | ast.Attribute | ast.Subscript):
            if isinstance(chain, ast.Call) and isinstance(chain.func, ast.Attribute):
                name = chain.func.attr
                to_cpu = name == "to" and any(
                    isinstance(a, ast.Constant) and a.value == "cpu" for a in chain.args
                )
                if name == "cpu" or to_cpu:
                    safe = True
                    break
                chain = chain.func.value
            elif isinstance(chain, ast.Call):
                break  # np.asarray(...).numpy() and the like: not a tensor chain
            else:
                chain = chain.value
        if not safe:
            bad.append(f"{path.relative_to(root)}:{node.lineno}")
    return bad


def test_no_tensor_is_read_with_numpy_in_place_in_the_trainer():
    """Tensors of the trainer may live on a GPU: a host read says ``.cpu()`` first."""
    bad = [b for f in sorted((ROOT / "trainers").rglob("*.py")) for b in _numpy_without_cpu(f)]
    assert not bad, "add .cpu() before .numpy(): " + ", ".join(bad)


def test_the_numpy_check_catches_a_device_read(tmp_path):
    f = tmp_path / "probe.py"
    f.write_text(
        "def f(t):\n    a = t.detach().numpy()\n"
        "    return a, t.cpu().numpy(), t.to('cpu').float().numpy()\n"
    )
    assert _numpy_without_cpu(f, tmp_path) == ["probe.py:2"]


# ------------------------------------------------------------------ collectives


class _OnDevice(DistInfo):
    """A process group whose backend device is not the CPU (as nccl's GPU)."""

    @property
    def device(self) -> torch.device:
        return torch.device("meta")


def test_cross_rank_sum_is_made_on_the_backends_device(monkeypatch):
    import torch.distributed as dist

    seen = []

    def all_reduce(t):
        seen.append((t.device, t.dtype))
        raise RuntimeError("stop here")  # a meta tensor holds no values to return

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    with pytest.raises(RuntimeError, match="stop here"):
        all_reduce_sum([1.0, 2.0], _OnDevice(rank=0, world_size=2, backend="nccl"))
    assert seen == [(torch.device("meta"), torch.float64)]


# ------------------------------------------------------------------ checkpoints


def test_rng_state_restores_without_the_gpus_that_saved_it():
    from agentgym.trainers.checkpoint import rng_state, set_rng_state

    state = rng_state()
    assert "cuda" not in state  # no GPU here
    # a checkpoint written on a GPU machine: its CUDA states are kept aside, not forced
    state["cuda"] = [torch.zeros(16, dtype=torch.uint8)]
    torch.manual_seed(1)
    want = torch.rand(3)
    torch.manual_seed(1)
    saved = rng_state()
    torch.rand(3)
    set_rng_state({**saved, "cuda": state["cuda"]})
    assert torch.equal(torch.rand(3), want)


# ------------------------------------------------------------------ HF engine sampling


def test_sampling_noise_is_drawn_on_the_scores_device():
    from agentgym.generation.sampling import RowNoise, SeededSampler

    noise = RowNoise([1, 2], [True, False], vocab=11, device=torch.device("cpu"))
    assert {g.device.type for g in noise.generators if g is not None} == {"cpu"}
    sampler = SeededSampler([1], [1.0], [1.0], device="cpu")
    assert sampler.generators[0].device.type == "cpu"
    # both decode paths draw the same numbers for the same seed, on that device
    from agentgym.generation.sampling import gumbel

    first = gumbel(torch.rand(11, generator=torch.Generator().manual_seed(1)))
    torch.testing.assert_close(noise.step(0, [0, 1])[0], first)
    chosen = sampler(torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 11))
    assert int(chosen[0].argmax()) == int(first.argmax())  # uniform scores: the noise picks


# ------------------------------------------------------------------ GPU smoke set


@pytest.mark.gpu
def test_gpu_single_process_trains_on_the_gpu_in_bf16(tmp_path, toy_envs_registered):
    trainer = DAPOTrainer(_cfg(tmp_path))  # model.device=auto, model.dtype=auto
    params = dict(trainer.model.named_parameters())
    assert {p.device.type for p in params.values()} == {"cuda"}
    assert {p.dtype for n, p in params.items() if "lora_" not in n} == {torch.bfloat16}
    assert {p.dtype for n, p in params.items() if "lora_" in n} == {torch.float32}
    assert trainer.engine.device.type == "cuda"
    _, m = trainer.train()
    assert m["losses/grad_norm"] > 0
    assert trainer.adapter_digest() != trainer.initial_adapter_digest
    trainer.close()
    rng = torch.load(
        tmp_path / "run" / "checkpoints" / "step_000002" / "rng.pt", weights_only=False
    )
    assert len(rng["cuda"]) == torch.cuda.device_count()
    again = DAPOTrainer(_cfg(tmp_path, "run.max_steps=3"), resume=True)
    state = again.learner.optimizer.state_dict()["state"]
    assert {t.device.type for s in state.values() for k, t in s.items() if k != "step"} == {"cuda"}
    again.train()
    again.close()


@pytest.mark.gpu
def test_gpu_hf_engine_draws_noise_on_the_gpu_and_repeats_its_samples(tokenizer):
    from agentgym import Message, SamplingParams
    from agentgym.generation import GenerationRequest, HFEngine
    from agentgym.generation.sampling import RowNoise

    assert RowNoise([1], [True], 7, torch.device("cuda")).generators[0].device.type == "cuda"
    base = build_preset("tiny-qwen2", tokenizer, overrides=TINY_QWEN)
    place_model(base, ModelConfig())  # auto: the GPU, bf16
    engine = HFEngine(base, tokenizer)
    assert engine.device.type == "cuda"
    reqs = [
        GenerationRequest(
            (Message("user", f"question {i}"),),
            SamplingParams(max_tokens=8, temperature=1.0, seed=i),
        )
        for i in range(4)
    ]
    first = [c.token_ids for c in engine.generate(reqs)]
    assert first == [c.token_ids for c in engine.generate(reqs)]


@pytest.mark.gpu
@pytest.mark.parametrize("strategy", ["fsdp2", "deepspeed"])
def test_gpu_two_ranks_train_under_nccl(tmp_path, strategy):
    """fsdp2 and ZeRO-3 on two GPUs (nccl, bf16): the cross-rank sums, the adapter
    gathered to the host on every rank, the per-rank optimizer shards."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    import os
    import subprocess

    out = tmp_path / "two"
    args = [
        f"run.output_dir={out}",
        "run.max_steps=2",
        "run.save_every=1",
        "run.threads=1",
        "run.progress=false",
        "run.plots=false",
        "envs=[{id: 'trainer_toy_envs:agentgym-test/EvenChars-v0'}]",
        f"model.preset_overrides={json.dumps(TINY_QWEN)}",
        "rollout.group_size=4",
        "rollout.batch_tasks=2",
        "rollout.max_tokens=10",
        "optim.lr=0.01",
        f"distributed.strategy={strategy}",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests" / "helpers")}
    cmd = [sys.executable, "-m", "agentgym", "train", *args, "--nproc", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads(p.read_text()) for p in sorted((out / "ranks").glob("rank*.json"))]
    assert len(ranks) == 2 and ranks[0]["adapter_sha256"] == ranks[1]["adapter_sha256"]
    assert ranks[0]["adapter_sha256"] != ranks[0]["initial_adapter_sha256"]
