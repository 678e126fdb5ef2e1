"""The name agentgym is installed under, and how to tell a user to install an extra.

The import name is ``agentgym``; the distribution (what ``pip install`` takes) is
``agentgym-toolkit``, because PyPI's ``agentgym`` is an unrelated project: an install
hint naming ``agentgym`` with an extra, outside a checkout, would install that one.
"""

from __future__ import annotations

from pathlib import Path

#: the distribution name on PyPI (``pip install agentgym-toolkit``)
DISTRIBUTION = "agentgym-toolkit"


def install_hint(extra: str) -> str:
    """``pip install 'agentgym-toolkit[EXTRA]'``, and from a source checkout the editable
    form that installs this checkout's extra instead."""
    hint = f"pip install '{DISTRIBUTION}[{extra}]'"
    root = Path(__file__).resolve().parents[1]
    pyproject = root / "pyproject.toml"
    try:
        ours = f'name = "{DISTRIBUTION}"' in pyproject.read_text(encoding="utf-8")
    except OSError:
        ours = False
    if ours:
        hint += f" (in this checkout: pip install -e '{root}[{extra}]')"
    return hint
