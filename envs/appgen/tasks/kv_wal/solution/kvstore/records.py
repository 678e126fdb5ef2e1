"""Length- and CRC-framed JSON records."""

import json
import struct
import zlib

HEADER = struct.Struct(">II")


def encode_record(op):
    payload = json.dumps(op, separators=(",", ":")).encode("utf-8")
    return HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def decode_records(data):
    ops = []
    pos = 0
    while pos + HEADER.size <= len(data):
        length, crc = HEADER.unpack_from(data, pos)
        start = pos + HEADER.size
        payload = data[start : start + length]
        if len(payload) < length or zlib.crc32(payload) != crc:
            break
        try:
            op = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            break
        ops.append(op)
        pos = start + length
    return ops, pos
