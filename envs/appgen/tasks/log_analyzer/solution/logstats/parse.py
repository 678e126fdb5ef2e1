"""Parsing Common Log Format lines."""

import re
from dataclasses import dataclass
from datetime import datetime

LINE = re.compile(
    r'(?P<host>\S+) \S+ \S+ \[(?P<time>[^\]]+)\] "(?P<request>[^"]*)" '
    r"(?P<status>\d{3}) (?P<size>\d+|-)"
)


@dataclass
class Entry:
    host: str
    time: datetime
    method: str
    path: str
    status: int
    size: int


def parse_line(line):
    match = LINE.fullmatch(line.strip())
    if not match:
        return None
    try:
        when = datetime.strptime(match["time"], "%d/%b/%Y:%H:%M:%S %z")
    except ValueError:
        return None
    parts = match["request"].split(" ")
    if len(parts) != 3 or not all(parts):
        return None
    size = 0 if match["size"] == "-" else int(match["size"])
    path = parts[1].split("?", 1)[0]
    return Entry(match["host"], when, parts[0], path, int(match["status"]), size)


def parse_file(path):
    entries = []
    malformed = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            entry = parse_line(line)
            if entry is None:
                malformed += 1
            else:
                entries.append(entry)
    return entries, malformed
