"""Read back a W&B offline run's transaction log (``run-*.wandb``) without the network.

The file is a ``:W&B`` header followed by a LevelDB-style log (32 KiB blocks; each
record fragment has a 7-byte header: CRC-32C, length, type), each record a protobuf
``wandb_internal_pb2.Record``. The tests use this to check what a run sent to W&B.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

BLOCK = 32768
HEADER = 7  # ":W&B", magic (2 bytes), version (1 byte); then each fragment's header: 7 bytes


def records(path: str | Path) -> list[Any]:
    """Every record of the log, decoded."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B transaction log")
    pos, pending, out = HEADER, b"", []
    while pos + 7 <= len(data):
        room = BLOCK - pos % BLOCK
        if room < 7:  # the rest of the block is padding
            pos += room
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            pos += room
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        pending += chunk
        if kind in (1, 4):  # FULL or LAST: a whole record
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(pending)
            out.append(rec)
            pending = b""
        elif kind == 2:  # FIRST
            pending = chunk
    return out


def history(path: str | Path) -> list[dict[str, Any]]:
    """The logged rows (``wandb.log``), each as {key: value} with ``_step``."""
    rows = []
    for rec in records(path):
        if rec.WhichOneof("record_type") == "history":
            row = {}
            for item in rec.history.item:
                key = item.key or "/".join(item.nested_key)
                row[key] = json.loads(item.value_json)
            rows.append(row)
    return rows


def config(path: str | Path) -> dict[str, Any]:
    """The run's config as sent (the run record's, then later updates)."""
    out: dict[str, Any] = {}
    for rec in records(path):
        kind = rec.WhichOneof("record_type")
        items = (
            rec.run.config.update
            if kind == "run"
            else rec.config.update
            if kind == "config"
            else ()
        )
        for item in items:
            key = item.key or "/".join(item.nested_key)
            out[key] = json.loads(item.value_json)
    return out
