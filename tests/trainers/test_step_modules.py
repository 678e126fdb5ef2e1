"""docs/architecture.md's list of the modules one DAPO step's data passes through, checked
against a real step: each function the table names is called, from the module named."""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path

from test_loop import _cfg

from agentgym.trainers.loop import DAPOTrainer

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def _table() -> list[tuple[str, list[str]]]:
    """``(module path, [qualified function names])`` rows of the section's table."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("### One step's data, module by module", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("`") and cells[1] != "module":
            functions = re.findall(r"`([\w.]+)`", cells[2])
            rows.append((cells[1].strip("`"), functions))
    return rows


def test_the_documented_modules_are_the_ones_a_step_calls(tmp_path, toy_envs_registered):
    rows = _table()
    modules = {m for m, _ in rows}
    assert 1 <= len(rows) <= 10 and len(modules) == len(rows), rows  # the bound
    trainer = DAPOTrainer(_cfg(tmp_path, "run.max_steps=1"))
    called: set[tuple[str, str]] = set()
    root = str(DOC.parents[1]) + "/"

    def profile(frame, event, _arg):
        if event == "call" and frame.f_code.co_filename.startswith(root):
            rel = frame.f_code.co_filename[len(root) :]
            called.add((rel, frame.f_code.co_qualname))

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        trainer.train_step()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        trainer.close()
    missing = [(m, f) for m, fs in rows for f in fs if (m, f) not in called]
    assert not missing, f"named in docs/architecture.md but not called from there: {missing}"
