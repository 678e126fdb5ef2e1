"""Short runs of every training loop, reduced to what a refactor must not change.

``python tests/helpers/capture_runs.py OUT.json`` runs, each on a tiny model on the CPU:
the quickstart's two stages in miniature (SFT on BalancedMath, then DAPO from it),
MemoryRecall (memory summaries), PPO, VAPO (value pretraining), T-PPO and A*PO (its
offline value stage), and writes for each the SHA-256 of the trained adapter (or model)
and critic, and every metrics row without its timings. Run it before and after a change
that must keep the trained weights (the learner, the loops): the two files must be equal
(``diff``), except what the change is meant to move.

Runs in about a couple of minutes on a 2-core machine.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import trainer_toy_envs

from agentgym import load_config

TINY = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}
COMMON = [
    "run.threads=1",
    "run.progress=false",
    "run.plots=false",
    "run.max_steps=2",
    f"model.preset_overrides={json.dumps(TINY)}",
    "rollout.group_size=4",
    "rollout.batch_tasks=2",
    "rollout.max_tokens=10",
    "optim.lr=0.01",
    "eval.at_ends=false",
]
EVEN = "envs=[{id: agentgym-test/EvenChars-v0}]"
MEMORY = (
    "envs=[{id: agentgym/MemoryRecall-v0, kwargs: {num_facts: 1, num_distractors: 1, "
    "chunk_size: 1, memory: {token_budget: 560, summary_max_tokens: 12, every_k_turns: 1}}}]"
)
RUNS = {
    "dapo": [EVEN],
    "memory": [MEMORY, "rollout.max_tokens=12", "algorithm.dynamic_sampling=false"],
    "ppo": [EVEN, "algorithm.name=ppo", "critic.lr=0.01"],
    "vapo": [EVEN, "algorithm.name=vapo", "critic.lr=0.01", "critic.pretrain_steps=2"],
    "tppo": [
        EVEN,
        "algorithm.name=tppo",
        "rollout.truncate_window=4",
        "critic.lr=0.01",
        "rollout.group_size=2",
    ],
    "apo": [
        EVEN,
        "algorithm.advantage=apo",
        "algorithm.loss=apo",
        "algorithm.dynamic_sampling=false",
        "algorithm.apo_value_samples=2",
        "rollout.group_size=1",
        "rollout.batch_tasks=4",
    ],
}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _weights(run: Path) -> dict[str, str]:
    latest = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    return {str(f.relative_to(latest)): _digest(f) for f in sorted(latest.rglob("*.safetensors"))}


def _rows(run: Path) -> list[dict]:
    from agentgym.trainers import read_jsonl

    return [
        {
            k: v
            for k, v in r.items()
            if not k.startswith(("time/", "charts/idle", "charts/tail", "charts/decode"))
        }
        for r in read_jsonl(run / "metrics.jsonl")
    ]


def _train(out: Path, extra: list[str]) -> dict:
    from agentgym.trainers import DAPOTrainer, TrainConfig

    cfg = load_config(TrainConfig, None, [f"run.output_dir={out}", *COMMON, *extra])
    DAPOTrainer(cfg).train()
    return {"weights": _weights(out), "rows": _rows(out)}


def _sft(out: Path) -> dict:
    from agentgym.trainers import SFTConfig, run_sft

    cfg = load_config(
        SFTConfig,
        str(Path(__file__).resolve().parents[2] / "configs" / "quickstart_sft.yaml"),
        [
            f"run.output_dir={out}",
            "run.progress=false",
            "run.plots=false",
            "train.max_steps=6",
            "train.save_every=3",
            "eval.num_tasks=4",
            f"model.preset_overrides={json.dumps(TINY)}",
        ],
    )
    run_sft(cfg)
    model = out / "model"
    return {
        "weights": {f.name: _digest(f) for f in sorted(model.glob("*.safetensors"))},
        "rows": _rows(out),
    }


def main() -> None:
    trainer_toy_envs.register()
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        result["sft"] = _sft(root / "sft")
        for name, extra in RUNS.items():
            result[name] = _train(root / name, extra)
    Path(sys.argv[1]).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
