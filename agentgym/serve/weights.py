"""The dtype ``agentgym serve`` serves a model folder in: the model's own, on both engines.

``--dtype auto`` means the dtype the model was saved in (``dtype``, or the older
``torch_dtype``, in its config.json; float32 where neither is written, as transformers
reads such a config). vLLM's own ``auto`` would serve a float32 model in bfloat16 on CPU
(and float16 on a GPU), and the HF engine's ``auto`` picks by device: either way the two
servers' log-probs would differ from each other and from the model's. A preset (no
folder) keeps the HF engine's rule (bfloat16 on a GPU that has it, else float32).
"""

from __future__ import annotations

import json
from pathlib import Path

#: the dtypes ``--dtype`` takes besides ``auto``
DTYPES = ("bfloat16", "float16", "float32")


def served_dtype(model: str | Path, asked: str = "auto") -> str:
    """``asked`` unless it is ``auto``; then the dtype model folder ``model`` was saved
    in, or ``auto`` for something that is not a folder (a preset)."""
    if asked != "auto":
        return asked
    config = Path(model) / "config.json"
    if not config.is_file():
        return "auto"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return "float32"
    saved = data.get("dtype") or data.get("torch_dtype") or "float32"
    return saved if saved in DTYPES else "float32"
