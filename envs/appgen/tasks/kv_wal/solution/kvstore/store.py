"""The key-value store: snapshot + write-ahead log."""

import json
import os
import tempfile

from kvstore.wal import WriteAheadLog

SNAPSHOT = "snapshot.json"
LOG = "wal.log"


def _check_key(key):
    if not isinstance(key, str):
        raise TypeError(f"keys must be str, got {type(key).__name__}")
    if not key:
        raise ValueError("keys must not be empty")


def _check_value(value):
    if not isinstance(value, str):
        raise TypeError(f"values must be str, got {type(value).__name__}")


class KVStore:
    def __init__(self, directory, max_wal_bytes=1_048_576):
        self.directory = directory
        self.max_wal_bytes = max_wal_bytes
        os.makedirs(directory, exist_ok=True)
        self.data = {}
        snapshot = os.path.join(directory, SNAPSHOT)
        if os.path.exists(snapshot):
            with open(snapshot, encoding="utf-8") as f:
                self.data = json.load(f)
        self.wal = WriteAheadLog(os.path.join(directory, LOG))
        self.wal.repair()
        for op in self.wal.read():
            self._apply(op)

    def _apply(self, op):
        if op["op"] == "put":
            self.data[op["key"]] = op["value"]
        elif op["op"] == "delete":
            self.data.pop(op["key"], None)
        elif op["op"] == "batch":
            for inner in op["ops"]:
                self._apply(inner)

    def _log(self, op):
        self.wal.append(op)
        self._apply(op)
        if self.wal.size() > self.max_wal_bytes:
            self.checkpoint()

    def put(self, key, value):
        _check_key(key)
        _check_value(value)
        self._log({"op": "put", "key": key, "value": value})

    def get(self, key, default=None):
        return self.data.get(key, default)

    def delete(self, key):
        if key not in self.data:
            return False
        self._log({"op": "delete", "key": key})
        return True

    def batch(self, ops):
        records = []
        for op in ops:
            if len(op) == 3 and op[0] == "put":
                try:
                    _check_key(op[1])
                    _check_value(op[2])
                except TypeError as e:
                    raise ValueError(str(e)) from None
                records.append({"op": "put", "key": op[1], "value": op[2]})
            elif len(op) == 2 and op[0] == "delete" and isinstance(op[1], str):
                records.append({"op": "delete", "key": op[1]})
            else:
                raise ValueError(f"bad batch operation: {op!r}")
        self._log({"op": "batch", "ops": records})

    def keys(self):
        return sorted(self.data)

    def __len__(self):
        return len(self.data)

    def __contains__(self, key):
        return key in self.data

    def checkpoint(self):
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".snapshot-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(self.data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(self.directory, SNAPSHOT))
        self.wal.clear()

    def close(self):
        pass
