"""Short codes: base-62 numbers and validation."""

import re
from urllib.parse import urlsplit

ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_CODE = re.compile(r"[A-Za-z0-9_-]{1,32}")


def encode(n):
    if n < 0:
        raise ValueError("only non-negative numbers can be encoded")
    digits = []
    while True:
        n, r = divmod(n, 62)
        digits.append(ALPHABET[r])
        if n == 0:
            return "".join(reversed(digits))


def decode(text):
    if not text:
        raise ValueError("empty code")
    n = 0
    for ch in text:
        index = ALPHABET.find(ch)
        if index < 0:
            raise ValueError(f"{ch!r} is not a base-62 digit")
        n = n * 62 + index
    return n


def is_valid_code(text):
    return isinstance(text, str) and bool(_CODE.fullmatch(text)) and text != "api"


def is_valid_url(text):
    if not isinstance(text, str):
        return False
    parts = urlsplit(text)
    return parts.scheme in ("http", "https") and bool(parts.hostname)
