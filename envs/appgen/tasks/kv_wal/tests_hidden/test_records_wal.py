import json
import struct
import zlib

from apptest import files


def test_encode_format():
    from kvstore.records import encode_record

    rec = encode_record({"op": "put", "key": "k", "value": "v"})
    length, crc = struct.unpack(">II", rec[:8])
    payload = rec[8:]
    assert length == len(payload)
    assert crc == zlib.crc32(payload)
    assert json.loads(payload) == {"op": "put", "key": "k", "value": "v"}


def test_decode_stops_at_damage():
    from kvstore.records import decode_records, encode_record

    a = encode_record({"op": "put", "key": "a", "value": "1"})
    b = encode_record({"op": "delete", "key": "a"})
    ops, valid = decode_records(a + b)
    assert ops == [{"op": "put", "key": "a", "value": "1"}, {"op": "delete", "key": "a"}]
    assert valid == len(a + b)
    assert decode_records(a + b[:-1]) == ([ops[0]], len(a))
    assert decode_records(a + b[:5]) == ([ops[0]], len(a))
    bad = bytearray(b)
    bad[-1] ^= 0xFF
    assert decode_records(a + bytes(bad) + a) == ([ops[0]], len(a))
    junk = b"not json"
    framed = struct.pack(">II", len(junk), zlib.crc32(junk)) + junk
    assert decode_records(a + framed) == ([ops[0]], len(a))
    assert decode_records(b"") == ([], 0)


def test_wal_append_read_repair(tmp_path):
    from kvstore.wal import WriteAheadLog

    path = str(tmp_path / "w.log")
    wal = WriteAheadLog(path)
    wal.append({"op": "put", "key": "x", "value": "1"})
    wal.append({"op": "put", "key": "y", "value": "2"})
    size = wal.size()
    files.append_bytes(path, b"\x00\x00\x00\x10abc")
    assert len(wal.read()) == 2
    assert wal.repair() == 7
    assert wal.size() == size
    wal.clear()
    assert wal.size() == 0 and wal.read() == []
