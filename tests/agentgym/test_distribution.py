"""The distribution name (issue 44, finding 6): PyPI's ``agentgym`` is an unrelated
project, so this one is published as ``agentgym-toolkit`` (the import name stays
``agentgym``); the scaffolds depend on that name, and every install hint names it."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import agentgym

ROOT = Path(__file__).resolve().parents[2]


def test_the_distribution_is_ours_and_installed_under_that_name():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == agentgym.DISTRIBUTION == "agentgym-toolkit"
    # the extras that name the project itself use the same name
    for extra in project["optional-dependencies"].values():
        for req in extra:
            assert not re.match(r"agentgym\[", req), req
    # scripts/setup.sh installed it under that name: no unrelated `agentgym` shadows it
    assert (
        importlib.metadata.distribution("agentgym-toolkit").metadata["Name"] == "agentgym-toolkit"
    )
    assert importlib.metadata.version("agentgym-toolkit") == agentgym.__version__


def test_new_env_scaffolds_depend_on_the_distribution(tmp_path):
    from agentgym.cli import main

    assert main(["new-env", "word-ladder", "--dir", str(tmp_path / "pkg")]) == 0
    deps = tomllib.loads((tmp_path / "pkg" / "pyproject.toml").read_text())["project"]
    assert deps["dependencies"] == ["agentgym-toolkit"]


def test_install_hints_name_the_distribution():
    hint = agentgym.install_hint("serve")
    assert "pip install 'agentgym-toolkit[serve]'" in hint
    # no source file tells users to install the unrelated package
    stale = []
    for folder in ("agentgym", "envs", "sandbox", "trainers", "benchmarks", "docs", "scripts"):
        for path in (ROOT / folder).rglob("*"):
            source = path.suffix in (".py", ".md", ".sh", ".tmpl") and path.is_file()
            if source and re.search(r"agentgym\[[a-z]", path.read_text(errors="replace")):
                stale.append(str(path.relative_to(ROOT)))
    readme = (ROOT / "README.md").read_text()
    assert not re.search(r"'agentgym\[", readme)
    assert not stale, stale
