"""Episodes as Hugging Face ``datasets`` / Parquet, with the conversation structure kept.

One row per episode. The columns a dataset user filters and sorts on are plain:
``env_id``, ``task_id``, ``seed``, ``sample``, ``reward``, ``terminated``, ``truncated``,
``num_conversations``, ``num_turns``, ``policy_tokens``, ``failed``. The episode itself is
nested, conversation by conversation::

    conversations: list of {index, turns: list of {kind,
                                                  messages: list of {role, content},
                                                  completion: {text, token_ids, logprobs,
                                                               finish_reason, num_tokens,
                                                               prompt_tokens}}}

and what has no fixed shape -- ``reward_breakdown``, ``metrics``, ``failure`` -- is a
JSON string. :func:`episodes_from_table` / :func:`read_episodes_parquet` /
:func:`episodes_from_dataset` give back :class:`agentgym.Episode` objects equal to the
ones written. Parquet is written with pyarrow (a core dependency); ``datasets`` is only
needed for :func:`episodes_to_dataset` (``pip install 'agentgym[trl]'``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from agentgym import ConfigError, Episode, iter_episodes

_MESSAGE = [("role", "string"), ("content", "string")]


def episode_schema() -> Any:
    """The pyarrow schema of an episode table (see the module docstring)."""
    import pyarrow as pa

    message = pa.struct([(n, pa.string()) for n, _ in _MESSAGE])
    completion = pa.struct(
        [
            ("text", pa.string()),
            ("token_ids", pa.list_(pa.int64())),
            ("logprobs", pa.list_(pa.float64())),
            ("finish_reason", pa.string()),
            ("num_tokens", pa.int64()),
            ("prompt_tokens", pa.int64()),
        ]
    )
    turn = pa.struct(
        [("kind", pa.string()), ("messages", pa.list_(message)), ("completion", completion)]
    )
    conversation = pa.struct([("index", pa.int64()), ("turns", pa.list_(turn))])
    return pa.schema(
        [
            ("env_id", pa.string()),
            ("task_id", pa.string()),
            ("seed", pa.int64()),
            ("sample", pa.int64()),
            ("reward", pa.float64()),
            ("terminated", pa.bool_()),
            ("truncated", pa.bool_()),
            ("failed", pa.bool_()),
            ("num_conversations", pa.int64()),
            ("num_turns", pa.int64()),
            ("policy_tokens", pa.int64()),
            ("conversations", pa.list_(conversation)),
            ("reward_breakdown", pa.string()),
            ("metrics", pa.string()),
            ("failure", pa.string()),
        ]
    )


def episode_row(episode: Episode) -> dict[str, Any]:
    """One episode as a row of :func:`episode_schema`."""
    d = episode.to_dict()
    conversations: list[dict[str, Any]] = []
    for t in d["turns"]:
        index = int(t["conversation"])
        if not conversations or conversations[-1]["index"] != index:
            conversations.append({"index": index, "turns": []})
        c = t["completion"]
        conversations[-1]["turns"].append(
            {
                "kind": t["kind"],
                "messages": t["messages"],
                "completion": {
                    "text": c["text"],
                    "token_ids": c["token_ids"],
                    "logprobs": c["logprobs"],
                    "finish_reason": c["finish_reason"],
                    "num_tokens": c["num_tokens"],
                    "prompt_tokens": c["prompt_tokens"],
                },
            }
        )
    return {
        "env_id": d["env_id"],
        "task_id": d["task_id"],
        "seed": d["seed"],
        "sample": d["sample"],
        "reward": d["reward"],
        "terminated": d["terminated"],
        "truncated": d["truncated"],
        "failed": episode.failed,
        "num_conversations": episode.num_conversations,
        "num_turns": len(episode.turns),
        "policy_tokens": episode.num_policy_tokens,
        "conversations": conversations,
        "reward_breakdown": json.dumps(d["reward_breakdown"], ensure_ascii=False),
        "metrics": json.dumps(d["metrics"], ensure_ascii=False),
        "failure": json.dumps(d["failure"]) if "failure" in d else None,
    }


def row_episode(row: Mapping[str, Any]) -> Episode:
    """The inverse of :func:`episode_row`."""
    turns = [
        {**t, "conversation": conv["index"]} for conv in row["conversations"] for t in conv["turns"]
    ]
    d: dict[str, Any] = {
        "env_id": row["env_id"],
        "task_id": row["task_id"],
        "seed": row["seed"],
        "sample": row["sample"],
        "reward": row["reward"] if row["reward"] is not None else float("nan"),
        "terminated": row["terminated"],
        "truncated": row["truncated"],
        "reward_breakdown": json.loads(row["reward_breakdown"] or "{}"),
        "metrics": json.loads(row["metrics"] or "{}"),
        "turns": turns,
    }
    if row.get("failure"):
        d["failure"] = json.loads(row["failure"])
    return Episode.from_dict(d)


def episodes_to_table(episodes: Iterable[Episode]) -> Any:
    """A ``pyarrow.Table`` of the episodes, one row each."""
    import pyarrow as pa

    return pa.Table.from_pylist([episode_row(e) for e in episodes], schema=episode_schema())


def episodes_from_table(table: Any) -> list[Episode]:
    """The episodes of a table written by :func:`episodes_to_table`."""
    return [row_episode(r) for r in table.to_pylist()]


def write_episodes_parquet(episodes: Iterable[Episode], path: str | Path) -> Path:
    """Write the episodes to a Parquet file (zstd); returns the path."""
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(episodes_to_table(episodes), str(path), compression="zstd")
    return path


def read_episodes_parquet(path: str | Path) -> list[Episode]:
    """The episodes of a Parquet file written by :func:`write_episodes_parquet`."""
    import pyarrow.parquet as pq

    return episodes_from_table(pq.read_table(str(path)))


def episodes_to_dataset(episodes: Iterable[Episode]) -> Any:
    """A ``datasets.Dataset`` of the episodes (the same columns as the Parquet file)."""
    try:
        from datasets import Dataset
    except ImportError as e:
        raise ConfigError(
            f"episodes_to_dataset needs datasets: pip install 'agentgym[trl]' ({e})."
        ) from e
    return Dataset(episodes_to_table(episodes))


def episodes_from_dataset(dataset: Any) -> list[Episode]:
    """The episodes of a dataset made by :func:`episodes_to_dataset` (or loaded from the
    Parquet file with ``datasets.load_dataset("parquet", ...)``)."""
    return [row_episode(r) for r in dataset]


def find_episode_files(run_dir: str | Path) -> list[Path]:
    """The episode JSONL files of a run folder (or the file itself).

    Looked for, recursively: ``episodes.jsonl`` (``agentgym bench``), ``*episodes*.jsonl``
    (``agentgym eval --out``, other tools); files whose first line is not an episode
    are skipped.
    """
    root = Path(run_dir)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise ConfigError(f"{str(root)!r} is neither an episodes JSONL file nor a folder.")
    found = []
    for path in sorted(root.rglob("*.jsonl")):
        if "episodes" not in path.name:
            continue
        with path.open(encoding="utf-8") as f:
            first = f.readline()
        try:
            row = json.loads(first) if first.strip() else None
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "turns" in row and "env_id" in row:
            found.append(path)
    return found


def iter_run_episodes(run_dir: str | Path) -> Iterator[tuple[Path, Episode]]:
    """Every episode of a run folder, with the file it came from."""
    for path in find_episode_files(run_dir):
        for ep in iter_episodes(path):
            yield path, ep
