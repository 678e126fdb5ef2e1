"""The rollout engine's place on the trainer's ranks, checked before any process starts
(``trainers/engine_check.py``), on the 671B config and variants of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgym import ConfigError, load_config
from agentgym.trainers import engine_placement

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "deepseek_v3_671b_48xh100.yaml"


def _cfg(*overrides: str):
    from agentgym.plan import PlanConfig

    return load_config(PlanConfig, str(CONFIG), list(overrides))


def test_the_671b_engine_lines_up_with_the_trainers_mesh():
    lines = engine_placement(_cfg(), 48)
    text = "\n".join(lines)
    assert "1 replica(s) of tp 8 x pp 6 over 48 ranks, driven by rank 0" in text
    assert "stage 0: layers 0-10, stage 1: layers 11-20" in text  # the trainer's split
    assert "trainer: ep=2 x tp=4 x pp=6 over 48 ranks" in text
    assert "none travel at a sync" in text  # worker t of a node: the experts rank t trains


def test_experts_that_do_not_line_up_are_reported_with_the_fix():
    # the trainer's expert group: 4 ranks of a stage; the engine splits experts 8 ways
    lines = engine_placement(_cfg("distributed.ep=1", "distributed.dp_shard=2"), 48)
    moved = [line for line in lines if line.startswith("experts:")]
    assert moved and "48 of 48 ranks" in moved[0] and "tensor_parallel_size" in moved[0]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("rollout.engine_options.pipeline_parallel_size=3",), "set pipeline_parallel_size=6"),
        (("rollout.engine_options.tensor_parallel_size=5",), "does not divide the 48 processes"),
        # pp 6 x tp 4: two replicas whose stages hold 4 ranks each, half a trainer stage
        (("rollout.engine_options.tensor_parallel_size=4",), "span one trainer stage's 8 ranks"),
    ],
)
def test_a_layout_that_cannot_work_is_refused_with_what_to_set(overrides, message):
    with pytest.raises(ConfigError, match=message):
        engine_placement(_cfg(*overrides), 48)


def test_the_hf_engine_has_nothing_to_place():
    assert engine_placement(_cfg("rollout.engine=hf", "rollout.engine_options={}"), 48) == []


def test_what_this_machines_vllm_cannot_serve_is_refused_before_any_process_starts(tmp_path):
    """The 671B launch on vLLM's CPU build: refused by the launcher with the reason,
    before a process or a run folder exists; --print-config only says so."""
    import subprocess
    import sys

    pytest.importorskip("vllm")
    out = tmp_path / "run"
    base = [sys.executable, "-m", "agentgym", "train", str(CONFIG), f"run.output_dir={out}"]
    launch = subprocess.run(
        [*base, "--nproc", "8", "--nnodes", "6", "--master-addr", "127.0.0.1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert launch.returncode == 2, launch.stderr[-2000:]
    assert "cannot serve LoRA on a mixture-of-experts model" in launch.stderr
    assert "Traceback" not in launch.stderr and not out.exists()
    shown = subprocess.run([*base, "--print-config"], capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0 and "not on this machine: vLLM's CPU build" in shown.stderr
