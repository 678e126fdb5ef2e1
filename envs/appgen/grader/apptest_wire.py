"""The wire between the grader and the project's process: framed JSON messages, plain values.

Runs inside the grading sandbox, on both sides of the boundary: in the grader's process
(``apptest``) and in the project's worker processes (``apptest_worker``). Standard library
only, Python 3.8+.

A message is a 4-byte big-endian length and that many bytes of UTF-8 JSON. Values travel
as JSON: ``None``, booleans, ints, floats (NaN and infinities included), strings and lists
as themselves; every other value is a JSON object with a tag ``"t"`` and a body ``"v"``:

=======  ==================================================================
``d``    dict, as a list of ``[key, value]`` pairs (keys may be any value)
``u``    tuple
``nt``   named tuple: ``"n"`` its name, ``"f"`` its fields, ``"v"`` the values
``s``    set, ``fs`` frozenset
``b``    bytes, base64
``dt``   datetime, ``da`` date, ``tm`` time (ISO 8601); ``td`` timedelta
``dec``  decimal.Decimal, as a string
``p``    a filesystem path (pathlib), as a string
=======  ==================================================================

Each side adds its own tags for what is not plain data (references to objects held by the
other side, callbacks, modules) through the ``other`` hooks of :func:`encode` and
:func:`decode`. Whatever arrives is rebuilt from these tags by the receiver's own code, so a
value that crosses is always a genuine built-in value: it cannot carry methods of the
sender's choosing.
"""

from __future__ import annotations

import base64
import collections
import datetime
import decimal
import json
import pathlib
import select
import socket
import struct
import time

#: the largest message either side accepts (bytes of JSON)
MAX_MESSAGE = 32 * 1024 * 1024
#: how deeply values may nest
MAX_DEPTH = 64


class WireError(Exception):
    """The other side closed the connection, went silent, or broke the protocol."""


class WireTimeout(WireError):
    """No complete message arrived before the deadline."""


class MessageTooLarge(WireError):
    """A message to send is larger than :data:`MAX_MESSAGE` (nothing was sent)."""


def send(sock: socket.socket, message: object) -> None:
    """Send one message (any JSON value)."""
    data = json.dumps(message, separators=(",", ":"), allow_nan=True).encode("utf-8")
    if len(data) > MAX_MESSAGE:
        raise MessageTooLarge(f"a message of {len(data)} bytes exceeds the limit of {MAX_MESSAGE}")
    try:
        sock.sendall(struct.pack(">I", len(data)) + data)
    except OSError as e:
        raise WireError(f"the connection broke while sending ({e})") from None


def recv(sock: socket.socket, deadline: float | None = None) -> object:
    """Receive one message; ``deadline`` is a ``time.monotonic()`` value (None: wait)."""
    (size,) = struct.unpack(">I", _read_exact(sock, 4, deadline))
    if size > MAX_MESSAGE:
        raise WireError(f"the other side announced a message of {size} bytes")
    body = _read_exact(sock, size, deadline)
    try:
        return json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise WireError(f"a message was not valid JSON ({type(e).__name__})") from None


def _read_exact(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    chunks = []
    while n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WireTimeout("no answer before the deadline")
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLIN)
            if not poller.poll(max(1, int(left * 1000))):
                continue
        try:
            chunk = sock.recv(min(n, 1 << 20))
        except OSError as e:
            raise WireError(f"the connection broke ({e})") from None
        if not chunk:
            raise WireError("the other side closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def encode(value, other, depth: int = 0):
    """``value`` as JSON-ready data; ``other(value, depth)`` encodes what is not plain."""
    t = type(value)
    if value is None or t is bool or t is int or t is float or t is str:
        return value
    if depth > MAX_DEPTH:
        raise ValueError(f"a value nests deeper than {MAX_DEPTH} levels")
    d = depth + 1
    if t is list:
        return [encode(x, other, d) for x in value]
    if t is dict:
        return {
            "t": "d",
            "v": [[encode(k, other, d), encode(v, other, d)] for k, v in value.items()],
        }
    if t is tuple:
        return {"t": "u", "v": [encode(x, other, d) for x in value]}
    if t is set or t is frozenset:
        return {"t": "s" if t is set else "fs", "v": [encode(x, other, d) for x in value]}
    if t is bytes:
        return {"t": "b", "v": base64.b64encode(value).decode("ascii")}
    if t is datetime.datetime:
        return {"t": "dt", "v": value.isoformat()}
    if t is datetime.date:
        return {"t": "da", "v": value.isoformat()}
    if t is datetime.time:
        return {"t": "tm", "v": value.isoformat()}
    if t is datetime.timedelta:
        return {"t": "td", "v": [value.days, value.seconds, value.microseconds]}
    if t is decimal.Decimal:
        return {"t": "dec", "v": str(value)}
    if isinstance(value, pathlib.PurePath):
        return {"t": "p", "v": str(value)}
    return other(value, depth)


def encode_named_tuple(value, other, depth: int):
    """A named tuple's name, fields and values (the fields must be strings)."""
    fields = [str(f) for f in type(value)._fields]
    return {
        "t": "nt",
        "n": str(type(value).__name__),
        "f": fields,
        "v": [encode(x, other, depth + 1) for x in tuple.__iter__(value)],
    }


_NAMED: dict = {}


def decode(data, other, depth: int = 0):
    """Rebuild a value from :func:`encode`'s data; ``other(obj, depth)`` handles other tags.

    Raises:
        WireError: the data is malformed or nests too deeply.
    """
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if depth > MAX_DEPTH:
        raise WireError(f"a value nests deeper than {MAX_DEPTH} levels")
    d = depth + 1
    if isinstance(data, list):
        return [decode(x, other, d) for x in data]
    if not isinstance(data, dict):
        raise WireError("malformed value")
    tag, body = data.get("t"), data.get("v")
    try:
        if tag == "d":
            return {_key(decode(k, other, d)): decode(v, other, d) for k, v in body}
        if tag == "u":
            return tuple(decode(x, other, d) for x in body)
        if tag == "s":
            return {_key(decode(x, other, d)) for x in body}
        if tag == "fs":
            return frozenset(_key(decode(x, other, d)) for x in body)
        if tag == "nt":
            return _named_tuple(str(data["n"]), tuple(str(f) for f in data["f"]))(
                *[decode(x, other, d) for x in body]
            )
        if tag == "b":
            return base64.b64decode(body.encode("ascii"), validate=True)
        if tag == "dt":
            return datetime.datetime.fromisoformat(body)
        if tag == "da":
            return datetime.date.fromisoformat(body)
        if tag == "tm":
            return datetime.time.fromisoformat(body)
        if tag == "td":
            days, seconds, micros = (int(x) for x in body)
            return datetime.timedelta(days=days, seconds=seconds, microseconds=micros)
        if tag == "dec":
            return decimal.Decimal(str(body))
        if tag == "p":
            return pathlib.Path(str(body))
    except WireError:
        raise
    except Exception as e:  # a malformed body of a known tag
        raise WireError(f"malformed {tag!r} value ({type(e).__name__})") from None
    return other(data, depth)


def _key(value):
    """``value`` usable as a dict key or set member (unhashable values are refused)."""
    try:
        hash(value)
    except TypeError:
        raise WireError("an unhashable value was used as a dict key or set member") from None
    return value


def _named_tuple(name: str, fields: tuple):
    key = (name, fields)
    cls = _NAMED.get(key)
    if cls is None:
        safe = name if name.isidentifier() else "NamedTuple"
        cls = collections.namedtuple(safe, fields, rename=True)
        if len(_NAMED) < 1000:
            _NAMED[key] = cls
    return cls
