"""docs/architecture.md's map of one DAPO step, checked against a real step: the ten
modules its data passes through (each function named there is called, and defined in the
module named beside it), and the helpers listed below them: every module of the project
the step enters is one of the two lists (a helper may be skipped, by a cache)."""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path

from test_loop import _cfg

from agentgym.trainers.loop import DAPOTrainer

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
#: the project's package folders (agentgym.trainers is trainers/, and so on)
PACKAGES = ("agentgym/", "trainers/", "envs/", "sandbox/", "benchmarks/")


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text.split("### One step's data, module by module", 1)[1].split("\n## ", 1)[0]


def _table(section: str) -> list[tuple[str, list[str]]]:
    """``(module path, [qualified function names])`` rows of the section's table."""
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("`"):
            rows.append((cells[1].strip("`"), re.findall(r"`([\w.]+)`", cells[2])))
    return rows


def _helpers(section: str) -> set[str]:
    """The module paths of the bullet list after the table."""
    bullets = section.split("\n\n* ", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"`((?:agentgym|trainers|envs|sandbox|benchmarks)/[\w/]+\.py)`", bullets))


def test_the_documented_modules_are_the_ones_a_step_enters(tmp_path, toy_envs_registered):
    section = _section()
    rows, helpers = _table(section), _helpers(section)
    table = {m for m, _ in rows}
    assert len(rows) == len(table) <= 10 and helpers and not table & helpers, (rows, helpers)
    trainer = DAPOTrainer(_cfg(tmp_path, "run.max_steps=2"))
    trainer.train_step()  # the first step imports what loads lazily; the second is measured
    called: set[tuple[str, str]] = set()
    root = f"{ROOT}/"

    def profile(frame, event, _arg):
        code = frame.f_code
        if event == "call" and code.co_filename.startswith(root) and code.co_name != "<module>":
            called.add((code.co_filename[len(root) :], code.co_qualname))

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        trainer.train_step()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        trainer.close()
    missing = [(m, f) for m, fs in rows for f in fs if (m, f) not in called]
    assert not missing, f"named in docs/architecture.md, not called there: {missing}"
    entered = {m for m, _ in called if m.startswith(PACKAGES)}
    assert entered >= table and entered - table - helpers == set(), (
        "update docs/architecture.md's map of one step: entered but not listed "
        f"{sorted(entered - table - helpers)}"
    )
