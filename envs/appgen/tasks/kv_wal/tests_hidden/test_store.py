import json
import os
import sys

import pytest

from apptest import files, subprocess

ROOT = os.getcwd()


def test_basic_ops(tmp_path):
    from kvstore.store import KVStore

    s = KVStore(str(tmp_path / "d"))
    s.put("b", "2")
    s.put("a", "1")
    s.put("a", "one")
    assert s.get("a") == "one" and s.get("zz") is None and s.get("zz", "dflt") == "dflt"
    assert s.keys() == ["a", "b"] and len(s) == 2 and "a" in s
    assert s.delete("b") is True
    size = s.wal.size() if hasattr(s, "wal") else None
    assert s.delete("b") is False
    if size is not None:
        assert s.wal.size() == size
    with pytest.raises(TypeError):
        s.put("k", 5)
    with pytest.raises(ValueError):
        s.put("", "v")


def test_recovery_replays_log(tmp_path):
    from kvstore.store import KVStore

    d = str(tmp_path / "d")
    s = KVStore(d)
    s.put("a", "1")
    s.put("b", "2")
    s.delete("a")
    s.close()
    r = KVStore(d)
    assert r.keys() == ["b"] and r.get("b") == "2"


def test_torn_tail_dropped(tmp_path):
    from kvstore.store import KVStore

    d = str(tmp_path / "d")
    s = KVStore(d)
    s.put("a", "1")
    s.put("b", "2")
    s.close()
    log = os.path.join(d, "wal.log")
    data = files.read_bytes(log)
    files.write_bytes(log, data[:-3])
    r = KVStore(d)
    assert r.keys() == ["a"]
    r.put("c", "3")
    r.close()
    assert KVStore(d).keys() == ["a", "c"]


def test_batch_atomic(tmp_path):
    from kvstore.store import KVStore

    d = str(tmp_path / "d")
    s = KVStore(d)
    s.put("x", "0")
    with pytest.raises(ValueError):
        s.batch([("put", "a", "1"), ("explode", "x")])
    with pytest.raises(ValueError):
        s.batch([("put", "a", "1"), ("put", "b", 2)])
    assert s.keys() == ["x"]
    s.batch([("put", "a", "1"), ("delete", "x"), ("put", "b", "2")])
    assert s.keys() == ["a", "b"]
    s.close()
    log = os.path.join(d, "wal.log")
    data = files.read_bytes(log)
    files.write_bytes(log, data[:-1])
    assert KVStore(d).keys() == ["x"]


def test_checkpoint(tmp_path):
    from kvstore.store import KVStore

    d = str(tmp_path / "d")
    s = KVStore(d)
    s.put("a", "1")
    s.put("b", "2")
    s.checkpoint()
    assert files.getsize(os.path.join(d, "wal.log")) == 0
    assert json.loads(files.read_text(os.path.join(d, "snapshot.json"))) == {"a": "1", "b": "2"}
    s.put("c", "3")
    s.close()
    assert KVStore(d).keys() == ["a", "b", "c"]
    leftovers = [n for n in files.listdir(d) if n not in ("snapshot.json", "wal.log")]
    assert leftovers == []


def test_auto_checkpoint(tmp_path):
    from kvstore.store import KVStore

    d = str(tmp_path / "d")
    s = KVStore(d, max_wal_bytes=200)
    for i in range(20):
        s.put(f"key{i}", "v" * 20)
    assert files.getsize(os.path.join(d, "wal.log")) <= 200
    assert files.exists(os.path.join(d, "snapshot.json"))
    s.close()
    assert len(KVStore(d)) == 20


def kv(d, *args):
    return subprocess.run(
        [sys.executable, "-m", "kvstore", str(d), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )


def test_cli(tmp_path):
    d = tmp_path / "cli"
    assert kv(d, "put", "name", "ada").stdout.strip() == "ok"
    assert kv(d, "put", "lang", "py").stdout.strip() == "ok"
    assert kv(d, "get", "name").stdout.strip() == "ada"
    out = kv(d, "get", "nope")
    assert out.returncode == 1 and out.stderr.strip() == "error: key not found: nope"
    assert kv(d, "keys").stdout.split() == ["lang", "name"]
    assert kv(d, "checkpoint").stdout.strip() == "ok"
    assert kv(d, "delete", "lang").stdout.strip() == "deleted"
    out = kv(d, "delete", "lang")
    assert out.returncode == 1 and out.stdout.strip() == "not found"
    assert kv(d, "keys").stdout.split() == ["name"]
