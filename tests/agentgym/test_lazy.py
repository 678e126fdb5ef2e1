"""One helper for every lazy package ``__init__`` (``agentgym.lazy_exports``), and what
the lazy packages promise: light imports, every public name resolvable."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from agentgym import lazy_exports

#: packages whose public names load on first use (their import must stay light)
LAZY_PACKAGES = (
    "agentgym",
    "agentgym.trainers",
    "agentgym.trainers.algorithm",
    "agentgym.trainers.sft",
    "agentgym.generation",
    "agentgym.trainers.parallel",
    "agentgym.trainers.tppo",
    "agentgym.trainers.integrations",
    "agentgym.serve",
    "agentgym.plan",
    "agentgym.benchmarks",
)


def test_names_resolve_on_first_use_and_dir_lists_them(monkeypatch):
    pkg = types.ModuleType("lazy_pkg")
    pkg.eager = 1
    pkg.__getattr__, pkg.__dir__ = lazy_exports(
        "lazy_pkg", {"sqrt": "math", "OrderedDict": "collections"}
    )
    monkeypatch.setitem(sys.modules, "lazy_pkg", pkg)
    import collections
    import math

    assert pkg.sqrt is math.sqrt and pkg.OrderedDict is collections.OrderedDict
    assert {"eager", "sqrt", "OrderedDict"} <= set(dir(pkg))
    with pytest.raises(AttributeError, match="module 'lazy_pkg' has no attribute 'nope'"):
        _ = pkg.nope
    # nothing is cached on the package: a name patched where it is defined shows through
    monkeypatch.setattr(math, "sqrt", len)
    assert pkg.sqrt is len


def test_importing_the_lazy_packages_does_not_import_torch():
    code = (
        "import sys\n"
        f"for name in {LAZY_PACKAGES!r}:\n"
        "    __import__(name)\n"
        "    assert 'torch' not in sys.modules, name\n"
        "import agentgym.health\n"
        "assert 'torch' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_config_checks_and_the_launcher_import_no_torch(tmp_path):
    """``--print-config``, ``agentgym plan`` and the launcher of ``--nproc N`` check a
    whole config (its sections, engine placement, the run folder) without torch: they
    answer in a fraction of a second, and a launch pays torch only in its ranks. The
    launch here stops at the run folder's check: a resume under another layout than the
    one its config.yaml (written by ``--print-config``) says. (A config with
    ``rollout.engine: vllm`` imports vLLM, and so torch, to check that this machine's vLLM
    serves its model.)"""
    out = tmp_path / "run"
    (out / "checkpoints" / "step_000001").mkdir(parents=True)
    (out / "checkpoints" / "step_000001" / "trainer_state.json").write_text("{}")
    run = ["train", "envs=[{id: agentgym/MemoryRecall-v0}]", "model.preset=tiny-qwen2"]
    run += [f"run.output_dir={out}", "distributed.strategy=fsdp2"]
    commands = [
        ["train", "configs/quickstart_dapo.yaml", "--print-config"],
        ["sft", "configs/quickstart_sft.yaml", "--print-config"],
        ["plan", "configs/deepseek_v3_671b_48xh100.yaml"],
        [*run, "distributed.tp=2", "--print-config"],
        [*run, "distributed.ep=2", "--resume", "--nproc", "2"],
    ]
    code = (
        "import contextlib, io, sys\n"
        "from agentgym.cli import main\n"
        f"for argv in {commands!r}:\n"
        "    printed = io.StringIO()\n"
        "    with contextlib.redirect_stdout(printed):\n"
        "        rc = main(argv)\n"
        "    assert rc == (2 if '--resume' in argv else 0), (argv, rc)\n"
        "    assert 'torch' not in sys.modules, argv\n"
        "    if 'distributed.tp=2' in argv:\n"
        f"        open({str(out / 'config.yaml')!r}, 'w').write(printed.getvalue())\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resume with the same dp_shard/tp/ep/pp" in done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_public_name_is_listed_by_dir(package):
    module = __import__(package, fromlist=["__all__"])
    assert set(module.__all__) <= set(dir(module))


@pytest.mark.parametrize(
    "package",
    [
        "agentgym",
        "agentgym.trainers.parallel",
        "agentgym.trainers.tppo",
        "agentgym.plan",
        "agentgym.trainers.algorithm",
        "agentgym.trainers.sft",
    ],
)
def test_every_public_name_resolves(package):
    module = __import__(package, fromlist=["__all__"])
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert not missing
