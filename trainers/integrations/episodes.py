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
JSON string. A table merged from a folder (:func:`run_episodes_table`) also says where
each row came from: ``policy`` (what played it, where the files record it) and
``source`` (its file, relative to the folder). :func:`episodes_from_table` / :func:`read_episodes_parquet` /
:func:`episodes_from_dataset` give back :class:`agentgym.Episode` objects equal to the
ones written. Parquet is written with pyarrow (a core dependency); ``datasets`` is only
needed for :func:`episodes_to_dataset` (``pip install 'agentgym-toolkit[trl]'``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym import (
    Completion,
    ConfigError,
    DataError,
    Episode,
    Message,
    Turn,
    iter_episodes,
)

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
            ("policy", pa.string()),
            ("source", pa.string()),
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


def episode_row(
    episode: Episode, source: str | None = None, policy: str | None = None
) -> dict[str, Any]:
    """One episode as a row of :func:`episode_schema` (``source`` and ``policy``: where
    it came from, when known)."""
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
        "policy": policy,
        "source": source,
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


def episodes_to_table(
    episodes: Iterable[Episode], origins: Sequence[tuple[str | None, str | None]] | None = None
) -> Any:
    """A ``pyarrow.Table`` of the episodes, one row each; ``origins`` gives each
    episode's ``(source, policy)`` (default: unknown)."""
    import pyarrow as pa

    episodes = list(episodes)
    origins = origins if origins is not None else [(None, None)] * len(episodes)
    if len(origins) != len(episodes):
        raise ConfigError(f"{len(episodes)} episodes but {len(origins)} origins.")
    rows = [episode_row(e, src, pol) for e, (src, pol) in zip(episodes, origins, strict=True)]
    return pa.Table.from_pylist(rows, schema=episode_schema())


def episodes_from_table(table: Any) -> list[Episode]:
    """The episodes of a table written by :func:`episodes_to_table`."""
    return [row_episode(r) for r in table.to_pylist()]


def write_episodes_parquet(episodes: Iterable[Episode] | Any, path: str | Path) -> Path:
    """Write the episodes (or a table of them: :func:`run_episodes_table`) to a Parquet
    file (zstd); returns the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = episodes if isinstance(episodes, pa.Table) else episodes_to_table(episodes)
    pq.write_table(table, str(path), compression="zstd")
    return path


def read_episodes_parquet(path: str | Path) -> list[Episode]:
    """The episodes of a Parquet file written by :func:`write_episodes_parquet`."""
    import pyarrow.parquet as pq

    return episodes_from_table(pq.read_table(str(path)))


def episodes_to_dataset(episodes: Iterable[Episode] | Any) -> Any:
    """A ``datasets.Dataset`` of the episodes, or of a table of them (the same columns
    as the Parquet file)."""
    import pyarrow as pa

    try:
        from datasets import Dataset
    except ImportError as e:
        raise ConfigError(
            f"episodes_to_dataset needs datasets: pip install 'agentgym-toolkit[trl]' ({e})."
        ) from e
    return Dataset(episodes if isinstance(episodes, pa.Table) else episodes_to_table(episodes))


def episodes_from_dataset(dataset: Any) -> list[Episode]:
    """The episodes of a dataset made by :func:`episodes_to_dataset` (or loaded from the
    Parquet file with ``datasets.load_dataset("parquet", ...)``)."""
    return [row_episode(r) for r in dataset]


#: what a JSONL file holds, from its first line: agentgym's episode records or a training
#: run's ``samples.jsonl`` rows (a few episodes per step, each turn's last prompt message)
EPISODES, SAMPLES = "episodes", "samples"


def episode_file_kind(path: str | Path) -> str | None:
    """:data:`EPISODES`, :data:`SAMPLES`, or ``None`` (not a file of episodes)."""
    with Path(path).open(encoding="utf-8") as f:
        first = f.readline()
    try:
        row = json.loads(first) if first.strip() else None
    except json.JSONDecodeError:
        return None
    if not isinstance(row, dict) or "env_id" not in row or not isinstance(row.get("turns"), list):
        return None
    turns = row["turns"]
    if "step" in row and (not turns or "reply" in turns[0]):
        return SAMPLES
    return EPISODES if not turns or "completion" in turns[0] else None


def find_episode_files(run_dir: str | Path) -> list[Path]:
    """The episode files of a folder (or the file itself).

    Every ``*.jsonl`` under the folder, at any depth, whose first line is an episode
    record (``agentgym eval --out``, ``agentgym bench``'s ``episodes.jsonl``, any file
    of :class:`agentgym.Episode` lines) or a training run's ``samples.jsonl`` row; other
    JSONL files (``metrics.jsonl``, ...) are skipped.

    Raises:
        ConfigError: the path does not exist, or is a file of neither kind.
    """
    root = Path(run_dir)
    if not root.exists():
        raise ConfigError(
            f"{str(root)!r} does not exist: pass a folder of episode files (agentgym eval "
            "--out, agentgym bench, a training run's samples.jsonl) or one such JSONL file."
        )
    if root.is_file():
        if episode_file_kind(root) is None:
            raise ConfigError(
                f"{str(root)!r} is not a file of episodes: its first line is neither an "
                "episode record (agentgym eval --out, agentgym bench) nor a training run's "
                "samples.jsonl row."
            )
        return [root]
    return [p for p in sorted(root.rglob("*.jsonl")) if episode_file_kind(p) is not None]


def sample_episode(row: Mapping[str, Any]) -> Episode:
    """A training run's ``samples.jsonl`` row as an :class:`agentgym.Episode`.

    The row keeps each turn's last prompt message only (the one the policy answered)
    and the reply's text and length, not its tokens; the step and the shaped reward go
    to ``metrics`` (``step``, ``shaped_reward``).
    """
    turns = [
        Turn(
            messages=(Message("user", str(t.get("prompt", ""))),),
            completion=Completion(
                text=str(t.get("reply", "")),
                num_tokens=t.get("tokens"),
                finish_reason=str(t.get("finish_reason") or "stop"),
            ),
            kind=t.get("kind", "act"),
            conversation=int(t.get("conversation", 0)),
        )
        for t in row["turns"]
    ]
    reward = row.get("reward")
    return Episode(
        env_id=row["env_id"],
        task_id=str(row.get("task_id", row.get("seed"))),
        seed=row.get("seed"),
        turns=turns,
        reward=float(reward) if reward is not None else float("nan"),
        reward_breakdown=dict(row.get("reward_breakdown") or {}),
        metrics={"step": row.get("step"), "shaped_reward": row.get("shaped_reward")},
        sample=int(row.get("sample", 0)),
    )


def _iter_samples(path: Path) -> Iterator[Episode]:
    with path.open(encoding="utf-8") as f:
        lines = f.readlines()
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield sample_episode(json.loads(line))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            if i == len(lines) and not line.endswith("\n"):
                return  # torn last line of an interrupted write
            raise DataError(f"{path}:{i}: not a valid samples.jsonl row ({e}).") from e


def file_policy(path: str | Path) -> str | None:
    """What played a file's episodes, where a file beside it records it: a benchmark's
    ``result.json`` (its policy spec), ``agentgym eval --out``'s ``NAME.meta.json``
    (``--policy``), or a training run's ``config.yaml`` for its ``samples.jsonl``
    (``train:RUN_DIR``, the run's model during training; ``metrics.step`` says when)."""
    path = Path(path)
    for meta in (path.with_suffix(".meta.json"), path.parent / "result.json"):
        if meta.is_file():
            try:
                policy = json.loads(meta.read_text(encoding="utf-8")).get("policy")
            except (json.JSONDecodeError, OSError, AttributeError):
                continue
            if isinstance(policy, Mapping):
                policy = policy.get("spec") or policy.get("label")
            if isinstance(policy, str) and policy:
                return policy
    if episode_file_kind(path) == SAMPLES:
        return f"train:{path.parent}"
    return None


def iter_run_episodes(run_dir: str | Path) -> Iterator[tuple[Path, Episode]]:
    """Every episode of a folder (see :func:`find_episode_files`), with its file."""
    for path in find_episode_files(run_dir):
        episodes = _iter_samples(path) if episode_file_kind(path) == SAMPLES else None
        for ep in episodes if episodes is not None else iter_episodes(path):
            yield path, ep


def run_episodes_table(run_dir: str | Path) -> tuple[Any, list[Path]]:
    """One table of every episode of a folder (or file), with each row's ``source``
    (its file, relative to the folder) and ``policy`` (:func:`file_policy`); and the
    files read."""
    root = Path(run_dir)
    files = find_episode_files(root)
    base = root if root.is_dir() else root.parent
    policies = {path: file_policy(path) for path in files}
    episodes, origins = [], []
    for path, ep in iter_run_episodes(root):
        episodes.append(ep)
        origins.append((path.relative_to(base).as_posix(), policies[path]))
    return episodes_to_table(episodes, origins), files
