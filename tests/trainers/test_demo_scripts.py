"""The README's demo scripts run to their end (issue 34, finding 2; issue 33): the
MemoryRecall demo in its smoke form (few steps, few tasks), in a scratch run folder,
through the final table that reads the run's metrics."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_the_memory_recall_demo_runs_to_its_table(tmp_path):
    env = {
        **os.environ,
        "RUN_DIR": str(tmp_path / "demo"),
        "SEED": "1",
        "SFT_ARGS": "train.max_steps=3 data.num_tasks=40",
        "DAPO_ARGS": "run.max_steps=1 eval.num_tasks=2 rollout.batch_tasks=2 rollout.group_size=2",
    }
    r = subprocess.run(
        ["bash", str(REPO / "scripts" / "memory_recall_demo.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    for line in (
        "recall, sampled at temperature 1",
        "recall, greedy",
        "target (after",
        "credit by turn kind",
    ):
        assert line in out, out[-3000:]
    assert "summary tokens per episode" in out and "overlong episodes" in out
    # the table says in words what changed, gives its units, and never prints nan
    assert "Held-out recall sampled at temperature 1" in out and "greedy recall" in out
    assert "nats" in out and "nan" not in out.lower().replace("n/a", ""), out[-3000:]
    assert "What was learned" in out or "DAPO did not raise sampled recall" in out
    # both stages ran with the demo's seed; the step row has the turn-kind breakdown
    dapo = tmp_path / "demo" / "dapo"
    sft = yaml.safe_load((tmp_path / "demo" / "sft" / "config.yaml").read_text())
    assert sft["run"]["seed"] == 1 and sft["model"]["init_seed"] == 1
    assert yaml.safe_load((dapo / "config.yaml").read_text())["run"]["seed"] == 1
    rows = [json.loads(x) for x in (dapo / "metrics.jsonl").read_text().splitlines() if x]
    step = next(r for r in rows if "charts/env_reward" in r)
    assert "kinds/summary_turns" in step and step["charts/conversations_mean"] == 4.0
