"""Problem sources: user data files (JSONL, Parquet) and the bundled hard set.

A row needs a problem and a gold answer. Column names are configurable; by default the
first present of these is used (dotted names reach into nested records), which covers
the common public math RL sets:

* problem: ``problem``, ``question``, ``Problem``, ``Question``, ``prompt``, ``query``,
  ``input`` -- a ``prompt`` that is a chat message list (DAPO-Math-17k, Skywork-OR1)
  gives the last user message, with DAPO's instruction wrapper removed;
* answer: ``answer``, ``Answer``, ``final_answer``, ``expected_answer``, ``gt_answer``,
  ``ground_truth``, ``reward_model.ground_truth``, ``target``, then ``solution`` (the
  last ``\\boxed{}`` of a MATH-style solution). A GSM8K answer ``... #### 72`` gives
  ``72``; a number becomes its text; a one-element list its element;
* solution (optional, for worked solutions): ``solution``, ``generated_solution``.

A row without a usable problem or answer raises :class:`~agentgym.errors.DataError`
naming the file, the row (1-based; the line number for JSONL) and the field.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any

from agentgym import ConfigError, DataError
from agentgym.envs.math.extract import find_boxed

__all__ = [
    "ANSWER_FIELDS",
    "PROBLEM_FIELDS",
    "SOLUTION_FIELDS",
    "MathItem",
    "load_hard",
    "load_problems",
]

PROBLEM_FIELDS = ("problem", "question", "Problem", "Question", "prompt", "query", "input")
ANSWER_FIELDS = (
    "answer",
    "Answer",
    "final_answer",
    "expected_answer",
    "gt_answer",
    "ground_truth",
    "reward_model.ground_truth",
    "target",
    "solution",
)
SOLUTION_FIELDS = ("solution", "generated_solution")

_DAPO_HEAD = re.compile(
    r"^\s*Solve the following math problem step by step\. The last line of your response "
    r"should be of the form Answer: \$Answer \(without quotes\) where \$Answer is the "
    r"answer to the problem\.\s*",
)
_DAPO_TAIL = re.compile(r"\s*Remember to put your answer on its own line after \"Answer:\"\s*$")
_GSM8K = re.compile(r"####\s*([^\n]+)\s*$")


@dataclass(frozen=True)
class MathItem:
    """One problem from a data source.

    Attributes:
        task_id: ``<source name>/<row>`` (row counted from 0), or the row's own id for
            the bundled set.
        problem: the statement.
        answer: the gold answer.
        solution: a worked solution when the source has one (may contain its own
            ``\\boxed{}``), else None.
        meta: other small fields kept for reference (topic, level...).
    """

    task_id: str
    problem: str
    answer: str
    solution: str | None = None
    meta: tuple[tuple[str, Any], ...] = ()


def _get(row: dict[str, Any], name: str) -> Any:
    if name in row:
        return row[name]
    cur: Any = row
    for part in name.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _problem_text(value: Any) -> str | None:
    if isinstance(value, str):
        text = value
    elif isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        users = [m.get("content") for m in value if m.get("role", "user") == "user"]
        text = users[-1] if users and isinstance(users[-1], str) else None
        if text is None:
            return None
    else:
        return None
    text = _DAPO_TAIL.sub("", _DAPO_HEAD.sub("", text)).strip()
    return text or None


def _answer_text(value: Any, field: str) -> str | None:
    if isinstance(value, list | tuple) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        if isinstance(value, float):
            if not math.isfinite(value):
                return None
            if value.is_integer():
                return str(int(value))
            return format(Decimal(repr(value)), "f")  # 1e-05 -> 0.00001 (no "e" to misread)
        return str(value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if field.split(".")[-1] in ("solution", "generated_solution") or "\\boxed" in text:
        boxes = find_boxed(text)
        if boxes:
            return boxes[-1].strip() or None
        if field.split(".")[-1] in ("solution", "generated_solution"):
            return None
    m = _GSM8K.search(text)
    if m:
        text = m.group(1).strip()
    return text or None


def _pick(row: dict[str, Any], explicit: str | None, defaults: Sequence[str]) -> tuple[str, Any]:
    if explicit is not None:
        return explicit, _get(row, explicit)
    for name in defaults:
        v = _get(row, name)
        if v is not None and v != "":
            return name, v
    return defaults[0], None


def _read_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(row number for messages, record)``; JSONL row numbers are line numbers."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        rows = []
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}: line {lineno}: not valid JSON ({e.msg}).") from e
                if not isinstance(rec, dict):
                    raise DataError(
                        f"{path}: line {lineno}: expected a JSON object per line, got "
                        f"{type(rec).__name__}."
                    )
                rows.append((lineno, rec))
        return rows
    if suffix in (".parquet", ".pq"):
        try:
            import pyarrow.parquet as pq
        except ImportError as e:  # pragma: no cover - pyarrow is a dependency
            raise ConfigError("Reading Parquet needs pyarrow: pip install pyarrow.") from e
        try:
            table = pq.read_table(path)
        except Exception as e:
            raise DataError(f"{path}: not a readable Parquet file ({e}).") from e
        return [(i, rec) for i, rec in enumerate(table.to_pylist(), start=1)]
    raise ConfigError(
        f"Unknown data file type {path.suffix!r} for {path}: use .jsonl (one JSON object "
        "per line) or .parquet."
    )


_CACHE: dict[tuple[Any, ...], tuple[MathItem, ...]] = {}
_CACHE_LOCK = threading.Lock()


def load_problems(
    path: str | Path,
    *,
    problem_field: str | None = None,
    answer_field: str | None = None,
    solution_field: str | None = None,
    name: str | None = None,
) -> tuple[MathItem, ...]:
    """Load every row of a JSONL or Parquet file as a :class:`MathItem`.

    Args:
        path: the file (``.jsonl``/``.json``/``.ndjson`` or ``.parquet``).
        problem_field / answer_field / solution_field: column names (dotted for nested
            fields); ``None`` tries the defaults listed in the module docstring.
        name: the prefix of task ids (default: the file name without extension).

    Raises:
        ConfigError: the file does not exist or has an unknown type.
        DataError: a row lacks a usable problem or answer (the message names the file,
            the row and the field), or the file has no rows.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"Data file {str(path)!r} not found. Pass source='generator', source='hard', or "
            "the path of a .jsonl/.parquet file with problem and answer columns."
        )
    stat = path.stat()
    key = (
        str(path.resolve()),
        stat.st_mtime_ns,
        stat.st_size,
        problem_field,
        answer_field,
        solution_field,
        name,
    )
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
    prefix = name or path.stem
    items = []
    for index, (rowno, rec) in enumerate(_read_rows(path)):
        where = f"{path}: row {rowno}"
        pfield, pval = _pick(rec, problem_field, PROBLEM_FIELDS)
        problem = _problem_text(pval)
        if problem is None:
            raise DataError(
                f"{where}: field {pfield!r} is missing or not a non-empty string (or chat "
                f"message list). Fields present: {sorted(rec)}. Set problem_field=... to "
                "the column holding the problem."
            )
        afield, aval = _pick(rec, answer_field, ANSWER_FIELDS)
        answer = _answer_text(aval, afield)
        if answer is None:
            raise DataError(
                f"{where}: field {afield!r} is missing or holds no usable answer (got "
                f"{_short(aval)}). Fields present: {sorted(rec)}. Set answer_field=... to "
                "the column holding the final answer."
            )
        _, sval = _pick(rec, solution_field, SOLUTION_FIELDS)
        solution = sval if isinstance(sval, str) and sval.strip() else None
        meta = tuple(
            (k, v)
            for k, v in rec.items()
            if k in ("id", "level", "type", "subject", "topic", "source", "data_source")
            and isinstance(v, str | int | float)
        )
        task_id = f"{prefix}/{index}"
        items.append(MathItem(task_id, problem, answer, solution, meta))
    if not items:
        raise DataError(f"{path}: the file has no rows.")
    result = tuple(items)
    with _CACHE_LOCK:
        _CACHE[key] = result
    return result


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def hard_set_path() -> Path:
    """Where the bundled hard set lives (``envs/math/data/hard.jsonl``)."""
    return Path(str(resources.files("agentgym.envs.math").joinpath("data", "hard.jsonl")))


def load_hard() -> tuple[MathItem, ...]:
    """The bundled set of harder problems (task ids ``hard/<id>``)."""
    items = load_problems(hard_set_path(), name="hard")
    out = []
    for item in items:
        meta = dict(item.meta)
        tid = f"hard/{meta['id']}" if "id" in meta else item.task_id
        out.append(MathItem(tid, item.problem, item.answer, item.solution, item.meta))
    return tuple(out)
