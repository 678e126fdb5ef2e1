"""The one-node launcher (:mod:`agentgym.cli.local_ranks`): ranks forked from one process
that imported torch once, in place of torchrun.

Its runs themselves are every ``agentgym train --nproc N`` test (layouts, faults, resume,
vLLM on the ranks); here: that its ranks see torchrun's environment, that it forks (the
imports start no thread), and which launcher a launch picks (a one-node run through torchrun, on
request: ``test_distributed.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap

from agentgym.cli import local_ranks
from agentgym.cli.local_ranks import PRELOAD, rank_env
from agentgym.cli.train import LOCAL_RANKS, QUIET_TORCHRUN, launch_command

#: what local_ranks sets otherwise than torchrun, on purpose (see rank_env)
DIFFERENT_VALUES = {
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
}
#: what torchrun sets for its own agent's use
AGENT_ONLY = {"TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_SIGNALS_TO_HANDLE", "_"}


def test_each_rank_gets_the_variables_torchrun_sets(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        textwrap.dedent(
            """
            import json, os
            base = set(json.loads(os.environ["PROBE_BASE"]))
            line = "ENV " + json.dumps({k: v for k, v in os.environ.items() if k not in base})
            os.write(1, (line + "\\n").encode())  # one write: the two ranks share the pipe
            """
        )
    )
    # what torchrun may set is left out of its environment (another test in this worker
    # may have left some in os.environ), so that every variable it sets shows as new
    ours = set(rank_env(0, 2, port=0))
    env = {k: v for k, v in os.environ.items() if k not in ours | AGENT_ONLY}
    env = {k: v for k, v in env.items() if not k.startswith(("TORCHELASTIC_", "TORCH_NCCL"))}
    env["PROBE_BASE"] = json.dumps([*env, "PROBE_BASE"])
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(probe)],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    ).stdout  # fmt: skip
    seen = [json.loads(line[4:]) for line in out.splitlines() if line.startswith("ENV ")]
    assert len(seen) == 2
    for theirs in seen:
        ours = rank_env(int(theirs["RANK"]), 2, port=12345)
        assert set(theirs) - AGENT_ONLY == set(ours), "torchrun sets another variable now"
        for key, value in ours.items():
            if key not in DIFFERENT_VALUES:
                assert theirs[key] == value, key


def test_the_preloaded_imports_start_no_thread():
    """Forking is safe from a process of one thread; an import that started one would
    make every launch start fresh interpreters (correct, but the saving gone). The
    launcher's environment: OMP_NUM_THREADS=1 (numpy's OpenBLAS starts no worker)."""
    env = {k: v for k, v in os.environ.items() if "NUM_THREADS" not in k}
    env["OMP_NUM_THREADS"] = "1"
    code = "import agentgym.cli.local_ranks as L\nprint(L.preload(), L._threads())\n"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.stdout.split() == ["True", "1"], out.stdout + out.stderr[-2000:]
    assert "torch" in PRELOAD and "transformers.modeling_utils" in PRELOAD


def _args(nproc: int, nnodes: int = 1) -> argparse.Namespace:
    return argparse.Namespace(
        nproc=nproc, nnodes=nnodes, node_rank=0, master_addr="10.0.0.1", master_port=None
    )


def test_one_node_forks_its_ranks_and_several_nodes_use_torchrun(monkeypatch, tmp_path):
    monkeypatch.delenv("AGENTGYM_LAUNCHER", raising=False)
    monkeypatch.setattr(local_ranks, "GPU_DEVICE_FILES", ())
    one = launch_command(["train", "c.yaml"], _args(2))
    assert one == [sys.executable, "-m", LOCAL_RANKS, "2", "train", "c.yaml"]
    two = launch_command(["train", "c.yaml"], _args(4, nnodes=2))
    assert two[1:3] == ["-m", QUIET_TORCHRUN] and "--nnodes=2" in two
    assert two[-3:] == ["agentgym", "train", "c.yaml"]
    monkeypatch.setenv("AGENTGYM_LAUNCHER", "torchrun")
    asked = launch_command(["train", "c.yaml"], _args(2))
    assert asked[1:3] == ["-m", QUIET_TORCHRUN] and "--standalone" in asked
    # a GPU driver's device file: torchrun (CUDA must not be probed before a fork)
    monkeypatch.delenv("AGENTGYM_LAUNCHER")
    gpu = tmp_path / "nvidiactl"
    gpu.touch()
    monkeypatch.setattr(local_ranks, "GPU_DEVICE_FILES", (str(gpu),))
    assert launch_command(["train", "c.yaml"], _args(2))[1:3] == ["-m", QUIET_TORCHRUN]


def test_rank_env_names_every_rank():
    envs = [rank_env(r, 3, port=4242) for r in range(3)]
    assert [e["RANK"] for e in envs] == ["0", "1", "2"]
    assert {e["WORLD_SIZE"] for e in envs} == {"3"} and {e["MASTER_PORT"] for e in envs} == {"4242"}


def test_a_script_runs_as_forked_ranks_and_a_failed_rank_stops_the_others(tmp_path):
    """``local_ranks 2 SCRIPT``: both ranks are the launcher's children with torchrun's
    variables; rank 1 exits with 3 while rank 0 would sleep for minutes: rank 0 is
    stopped (else the launch would outlive the timeout) and the launch exits with 3."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        textwrap.dedent(
            f"""
            import json, os, sys, time
            rank = int(os.environ["RANK"])
            row = {{"ppid": os.getppid(), "world": os.environ["WORLD_SIZE"], "argv": sys.argv}}
            row["cmdline"] = open("/proc/self/cmdline").read()  # the launcher's: forked
            with open(os.path.join({str(tmp_path)!r}, f"rank{{rank}}.json"), "w") as f:
                json.dump(row, f)
            if rank == 1:
                sys.exit(3)
            time.sleep(600)
            """
        )
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "agentgym.cli.local_ranks", "2", str(probe), "x"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 3, err[-2000:]
    assert "rank 1 failed (exit status 3)" in err
    rows = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["ppid"] for r in rows] == [proc.pid, proc.pid]
    assert all("agentgym.cli.local_ranks" in r["cmdline"] for r in rows)  # forked, not exec'd
    assert all(r["world"] == "2" and r["argv"] == [str(probe), "x"] for r in rows)
