"""The README's demo scripts run to their end (issue 34, finding 2): the MemoryRecall demo
in its smoke form (few steps, few held-out tasks), in a scratch run folder, through the
final table that imports the trainers' public names."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_memory_recall_demo_runs_to_its_table(tmp_path):
    env = {
        **os.environ,
        "RUN_DIR": str(tmp_path / "demo"),
        "SFT_ARGS": "train.max_steps=3",
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
    assert "recall (share of codes right)" in r.stdout and "target (after" in r.stdout
