"""Registration of built-in envs, plugins through entry points, and id errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import pytest

import agentgym
from agentgym.errors import UnknownNameError
from agentgym.registration import resolve_env_id


def run_py(code: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_import_registers_builtin_envs_under_the_namespace():
    ids = agentgym.agentgym_env_ids()
    assert "agentgym/MemoryRecall-v0" in ids
    env = gym.make("agentgym/MemoryRecall-v0")
    assert isinstance(env.unwrapped, agentgym.ConversationEnv)


def test_module_prefixed_id_works_without_importing_agentgym():
    r = run_py(
        """
        import sys, gymnasium as gym
        assert "agentgym" not in sys.modules
        env = gym.make("agentgym:agentgym/MemoryRecall-v0")
        obs, info = env.reset(seed=0)
        print(type(env.unwrapped).__name__, info["conversation"])
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "MemoryRecallEnv 0"


def test_unknown_id_suggests_the_closest():
    with pytest.raises(UnknownNameError, match="Did you mean: 'agentgym/MemoryRecall-v0'"):
        resolve_env_id("agentgym/MemoryRecal-v0")
    assert resolve_env_id("MemoryRecall-v0") == "agentgym/MemoryRecall-v0"


def write_plugin(root, *, broken: bool = False) -> None:
    """A minimal installed distribution: a module plus dist-info with an entry point."""
    pkg = root / "toyplugin"
    pkg.mkdir(parents=True)
    body = "raise RuntimeError('boom at import')\n" if broken else ""
    (pkg / "__init__.py").write_text(
        body
        + textwrap.dedent(
            """
            def register():
                import gymnasium as gym
                gym.register(id="toyplugin/Echo-v0",
                             entry_point="agentgym.envs.memory_recall:MemoryRecallEnv")
            """
        )
    )
    info = root / "toyplugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[agentgym.envs]\ntoy = toyplugin:register\n")


def test_plugin_entry_point_registers_envs_on_import(tmp_path):
    write_plugin(tmp_path)
    r = run_py(
        """
        import gymnasium as gym, agentgym
        env = gym.make("toyplugin/Echo-v0")
        print("toyplugin/Echo-v0" in agentgym.agentgym_env_ids())
        """,
        {"PYTHONPATH": str(tmp_path)},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"


def test_broken_plugin_warns_with_its_name_and_import_still_works(tmp_path):
    write_plugin(tmp_path, broken=True)
    r = run_py(
        """
        import warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            import agentgym
        print(agentgym.agentgym_env_ids())
        print([str(x.message) for x in w])
        """,
        {"PYTHONPATH": str(tmp_path)},
    )
    assert r.returncode == 0, r.stderr
    assert "agentgym/MemoryRecall-v0" in r.stdout
    assert "plugin 'toy'" in r.stdout and "boom at import" in r.stdout
