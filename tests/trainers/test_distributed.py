"""Sharded training: DeepSpeed ZeRO-2/3 and FSDP2 with 2 processes (gloo, CPU) via the CLI.

Each multi-process case runs ``agentgym train ... --nproc 2`` (its ranks forked by
:mod:`agentgym.cli.local_ranks`; one case through torchrun) for two steps (``lora_A``
gets no gradient until ``lora_B`` has left zero in step 1) and checks that

* the adapter moved, and every rank holds the same adapter (``ranks/rank<r>.json``);
* the run equals a single-process run of the same config: same per-step rewards and
  losses, adapter weights equal to float tolerance (the ranks split the rollout and the
  micro-batches; the maths is the single-process maths).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TINY_QWEN
from safetensors.torch import load_file

from agentgym import load_config
from agentgym.errors import ConfigError
from agentgym.trainers.batch import Sample, make_microbatches
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.distributed import DistInfo, torchrun_command
from agentgym.trainers.logging import read_jsonl
from agentgym.trainers.loop import DAPOTrainer

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
ENV = "envs=[{id: 'trainer_toy_envs:agentgym-test/EvenChars-v0'}]"


def _args(out: Path, preset: str, *extra: str) -> list[str]:
    model = (
        ["model.preset=tiny-qwen2", f"model.preset_overrides={json.dumps(TINY_QWEN)}"]
        if preset == "tiny-qwen2"
        else ["model.preset=tiny-deepseek-v3"]
    )
    return [
        f"run.output_dir={out}",
        "run.max_steps=2",
        "run.save_every=1",
        "run.threads=1",
        "run.progress=false",
        "run.plots=false",
        ENV,
        *model,
        "rollout.group_size=4",
        "rollout.batch_tasks=2",
        "rollout.max_tokens=10",
        "algorithm.micro_batch_size=3",
        "optim.lr=0.01",
        *extra,
    ]


def _train_cli(
    args: list[str], nproc: int, *flags: str, **env_vars: str
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **env_vars}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HELPERS), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "agentgym", "train", *args, "--nproc", str(nproc), *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc


def _adapter(out: Path, step: int = 2) -> dict[str, torch.Tensor]:
    return load_file(
        str(out / "checkpoints" / f"step_{step:06d}" / "adapter" / "adapter_model.safetensors")
    )


def _steps(out: Path) -> list[tuple[float, float]]:
    return [(r["charts/reward"], r["losses/total"]) for r in read_jsonl(out / "metrics.jsonl")]


_single_runs: dict[str, Path] = {}


@pytest.fixture
def single_run(tmp_path_factory, toy_envs_registered):
    """The same config trained in this process (one per preset, shared by the cases)."""

    def get(preset: str) -> Path:
        if preset not in _single_runs:
            out = tmp_path_factory.mktemp(f"single-{preset}")
            DAPOTrainer(load_config(TrainConfig, None, _args(out, preset))).train()
            _single_runs[preset] = out
        return _single_runs[preset]

    return get


def _assert_same_as_single(out: Path, single: Path) -> None:
    ranks = [json.loads(p.read_text()) for p in sorted((out / "ranks").glob("rank*.json"))]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert ranks[0]["adapter_sha256"] == ranks[1]["adapter_sha256"]  # identical on every rank
    assert ranks[0]["adapter_sha256"] != ranks[0]["initial_adapter_sha256"]  # and it moved
    got, want = _steps(out), _steps(single)
    assert len(got) == len(want) == 2
    for (r1, l1), (r2, l2) in zip(got, want, strict=True):
        assert r1 == pytest.approx(r2, abs=1e-9)  # the same episodes
        assert l1 == pytest.approx(l2, abs=1e-5)
    a, b = _adapter(out), _adapter(single)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-4, rtol=1e-4, msg=k)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("strategy", "preset"),
    [
        ("deepspeed-3", "tiny-qwen2"),
        ("deepspeed-3", "tiny-deepseek-v3"),
        ("fsdp2", "tiny-qwen2"),
        ("fsdp2", "tiny-deepseek-v3"),
        ("deepspeed-2", "tiny-qwen2"),
    ],
)
def test_two_processes_match_one(tmp_path, single_run, strategy, preset):
    name, _, stage = strategy.partition("-")
    extra = [f"distributed.strategy={name}"] + (
        [f"distributed.zero_stage={stage}"] if stage else []
    )
    out, extensions = tmp_path / "run", tmp_path / "extensions"
    proc = _train_cli(_args(out, preset, *extra), 2, TORCH_EXTENSIONS_DIR=str(extensions))
    _assert_same_as_single(out, single_run(preset))
    # DeepSpeed compiles no C++ extension (its shared-memory one serves inference only)
    assert not extensions.exists() and "built successfully" not in proc.stdout + proc.stderr
    if preset == "tiny-deepseek-v3":  # the routed experts' LoRA is in the adapter and moved
        expert_keys = [k for k in _adapter(out) if "experts" in k]
        assert expert_keys
        first = _adapter(out, step=1)
        assert any(not torch.equal(_adapter(out)[k], first[k]) for k in expert_keys)


@pytest.mark.slow
def test_one_node_through_torchrun_on_request_matches_one_process(tmp_path, single_run):
    """``AGENTGYM_LAUNCHER=torchrun``: one node's ranks started by torchrun instead of
    forked (:mod:`agentgym.cli.local_ranks`, every other case here), the same run."""
    out = tmp_path / "run"
    args = _args(out, "tiny-qwen2", "distributed.strategy=fsdp2")
    proc = _train_cli(args, 2, AGENTGYM_LAUNCHER="torchrun")
    assert "launching: -m agentgym.cli.torchrun --nproc-per-node=2 --standalone" in proc.stderr
    _assert_same_as_single(out, single_run("tiny-qwen2"))


@pytest.mark.slow
def test_sharded_resume_continues_like_an_uninterrupted_run(tmp_path, single_run):
    out = tmp_path / "run"
    args = _args(out, "tiny-qwen2", "distributed.strategy=deepspeed")
    _train_cli([*args, "run.max_steps=1"], 2)
    assert (out / "checkpoints" / "step_000001" / "optimizer.rank1-of-2.pt").is_file()
    proc = _train_cli(args, 2, "--resume")
    assert "resumed from" in proc.stdout
    _assert_same_as_single(out, single_run("tiny-qwen2"))


@pytest.mark.slow
def test_two_nodes_on_loopback_train_together_and_match_one_process(tmp_path, single_run):
    """Two launchers, one process each, joined as node 0 and node 1 through 127.0.0.1
    (torchrun's static rendezvous, as on two machines sharing the run folder)."""
    import socket

    with socket.socket() as s:  # a free port for node 0's store
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "run"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HELPERS), env.get("PYTHONPATH")]))
    args = _args(out, "tiny-qwen2", "distributed.strategy=fsdp2")
    cmd = [sys.executable, "-m", "agentgym", "train", *args, "--nproc", "1", "--nnodes", "2"]
    where = ["--master-addr", "127.0.0.1", "--master-port", str(port)]
    nodes = [
        subprocess.Popen(
            [*cmd, "--node-rank", str(rank), *where],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for rank in (0, 1)
    ]
    try:
        logs = [p.communicate(timeout=600)[0] for p in nodes]
    finally:
        for p in nodes:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in nodes] == [0, 0], "\n".join(log[-3000:] for log in logs)
    assert "--nnodes=2" in logs[1] and "--node-rank=1" in logs[1]
    _assert_same_as_single(out, single_run("tiny-qwen2"))


def test_a_sharded_checkpoint_needs_the_same_number_of_processes(tmp_path):
    from agentgym.trainers.checkpoint import read_checkpoint

    ckpt = tmp_path / "step_000001"
    ckpt.mkdir()
    (ckpt / "trainer_state.json").write_text(json.dumps({"step": 1, "world_size": 2}))
    with pytest.raises(ConfigError, match="--nproc 2"):
        read_checkpoint(ckpt, lora=True)


def test_a_rank_reads_only_its_own_optimizer_shard(tmp_path):
    """On resume a rank of a sharded learner reads its optimizer file alone: another
    rank's file (here a damaged one) is never opened; ``all`` (ZeRO-2) reads each."""
    from safetensors.torch import save_file

    from agentgym import CheckpointError
    from agentgym.trainers.checkpoint import read_checkpoint, rng_state
    from agentgym.trainers.strategies import DeepSpeedZeRO
    from agentgym.trainers.strategy import Strategy

    ckpt = tmp_path / "step_000001"
    (ckpt / "adapter").mkdir(parents=True)
    save_file({"w": torch.zeros(2)}, str(ckpt / "adapter" / "adapter_model.safetensors"))
    torch.save(rng_state(), ckpt / "rng.pt")
    (ckpt / "trainer_state.json").write_text(json.dumps({"step": 1, "world_size": 2}))
    (ckpt / "optimizer.rank0-of-2.pt").write_bytes(b"not a torch file")
    torch.save({"state": {}, "mine": 1}, ckpt / "optimizer.rank1-of-2.pt")
    rank1 = DistInfo(rank=1, world_size=2, local_rank=1, backend="gloo")
    _, optim, _ = read_checkpoint(ckpt, lora=True, dist=rank1, optimizer="own")
    assert optim[0] is None and optim[1]["mine"] == 1
    with pytest.raises(CheckpointError, match=r"optimizer\.rank0-of-2\.pt cannot be read"):
        read_checkpoint(ckpt, lora=True, dist=rank1, optimizer="all")
    assert Strategy.optimizer_shards_read == "own"
    assert DeepSpeedZeRO.optimizer_shards_read == "all"


def test_a_mesh_rank_reads_the_adapter_tensor_by_tensor(tmp_path):
    """``lazy_adapter``: the checkpoint's adapter as LazyTensors, each tensor read when
    asked for; a damaged file is named with its checkpoint."""
    from safetensors.torch import save_file

    from agentgym import CheckpointError
    from agentgym.trainers.checkpoint import LazyTensors, read_checkpoint, rng_state

    ckpt = tmp_path / "step_000001"
    (ckpt / "adapter").mkdir(parents=True)
    tensors = {"a.lora_A.weight": torch.arange(6.0).view(2, 3), "b.lora_B.weight": torch.ones(4)}
    save_file(tensors, str(ckpt / "adapter" / "adapter_model.safetensors"))
    torch.save(rng_state(), ckpt / "rng.pt")
    torch.save({}, ckpt / "optimizer.pt")
    (ckpt / "trainer_state.json").write_text(json.dumps({"step": 1, "world_size": 1}))
    weights, _, _ = read_checkpoint(ckpt, lora=True, lazy_adapter=True)
    assert isinstance(weights, LazyTensors)
    assert sorted(weights) == sorted(tensors) and len(weights) == 2
    assert all(torch.equal(weights[k], v) for k, v in tensors.items())
    with pytest.raises(KeyError):
        weights["missing"]
    f = ckpt / "adapter" / "adapter_model.safetensors"
    f.write_bytes(f.read_bytes()[:-8])  # the last tensor's data cut short: found at opening
    with pytest.raises(CheckpointError, match=r"step_000001: adapter/adapter_model\.safetensors"):
        read_checkpoint(ckpt, lora=True, lazy_adapter=True)


# ----------------------------------------------------------------------------- units


def test_micro_batches_are_dealt_to_ranks_and_padded_to_equal_counts():
    from agentgym.trainers.learner import Learner
    from agentgym.trainers.strategy import Strategy

    samples = [Sample((1, 2), tuple(range(3, 3 + n)), 1.0, i) for i, n in enumerate([1, 2, 3])]
    mbs = make_microbatches(samples, 1, 0)  # three micro-batches for two ranks
    learner = Learner.__new__(Learner)
    shares = []
    for rank in (0, 1):
        learner.strategy = Strategy(DistInfo(rank=rank, world_size=2))
        shares.append(learner._my_microbatches(list(mbs)))
    assert [len(s) for s in shares] == [2, 2]
    assert [mb.num_tokens for mb in shares[0]] == [1, 3]
    assert [mb.num_tokens for mb in shares[1]] == [2, 0]  # padded with an empty one
    pad = shares[1][1]
    assert pad.indices == [] and float(pad.loss_mask.sum()) == 0.0
    assert float(pad.advantages.abs().sum()) == 0.0


def test_shutdown_joins_the_gloo_threads_of_groups_held_in_cycles(tmp_path):
    """After ``shutdown`` no gloo worker thread of a group the run held is left for the
    interpreter's exit, where one that frees a tensor aborts the process ("terminate
    called without an active exception", seen at the end of runs that succeeded)."""
    cmd = [*torchrun_command([], nproc=2)[:-2], str(HELPERS / "shutdown_probe.py")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    left = [line for line in proc.stdout.splitlines() if "gloo threads left" in line]
    assert sorted(left) == ["rank 0 gloo threads left: 0", "rank 1 gloo threads left: 0"]


def test_torchrun_command_single_and_multi_node():
    one = torchrun_command(["train", "c.yaml"], nproc=2)
    assert "--standalone" in one and "--nproc-per-node=2" in one
    assert one[-4:] == ["-m", "agentgym", "train", "c.yaml"]
    multi = torchrun_command(
        ["train"], nproc=8, nnodes=6, node_rank=3, master_addr="10.0.0.1", master_port=29400
    )
    assert "--nnodes=6" in multi and "--node-rank=3" in multi
    assert "--master-addr=10.0.0.1" in multi and "--master-port=29400" in multi
    with pytest.raises(ConfigError, match="--master-addr"):
        torchrun_command(["train"], nproc=8, nnodes=2, node_rank=1)
    with pytest.raises(ConfigError, match="--node-rank"):
        torchrun_command(["train"], nproc=8, nnodes=2, node_rank=2, master_addr="h")


def test_config_errors_say_what_to_set(tmp_path, monkeypatch):
    from agentgym.cli import main

    with pytest.raises(ConfigError, match="none, deepspeed or fsdp2"):
        load_config(TrainConfig, None, ["distributed.strategy=zero3"])
    with pytest.raises(ConfigError, match="zero_stage must be 2 or 3"):
        load_config(TrainConfig, None, ["distributed.zero_stage=1"])
    # several processes need a sharded strategy
    assert main(["train", f"run.output_dir={tmp_path}", "--nproc", "2"]) == 2
    # a sharded strategy trains LoRA only
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    cfg = load_config(
        TrainConfig,
        None,
        [f"run.output_dir={tmp_path}", "distributed.strategy=fsdp2", "lora.enabled=false"],
    )
    with pytest.raises(ConfigError, match=r"lora\.enabled=true"):
        DAPOTrainer(cfg)
    cfg = load_config(TrainConfig, None, [f"run.output_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"distributed\.strategy=deepspeed"):
        DAPOTrainer(cfg)


def test_module_prefixed_env_ids_import_the_module(monkeypatch):
    import gymnasium as gym

    from agentgym.errors import UnknownNameError
    from agentgym.registration import resolve_env_id

    gym.registry.pop("agentgym-test/EvenChars-v0", None)
    sys.modules.pop("trainer_toy_envs", None)
    assert resolve_env_id("trainer_toy_envs:agentgym-test/EvenChars-v0") == (
        "agentgym-test/EvenChars-v0"
    )
    with pytest.raises(UnknownNameError, match="PYTHONPATH"):
        resolve_env_id("no_such_module_here:Foo-v0")
