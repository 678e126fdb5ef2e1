"""Append-only event store in a JSON Lines file."""

import json
import os

from ledger.errors import ConcurrencyError
from ledger.events import Event


class EventStore:
    def __init__(self, path):
        self.path = path
        if not os.path.exists(path):
            open(path, "w").close()

    def _read(self):
        with open(self.path, "rb") as f:
            raw = f.read()
        complete = raw[: raw.rfind(b"\n") + 1]
        events = [Event.from_dict(json.loads(line)) for line in complete.splitlines() if line]
        return events, len(complete)

    def all(self):
        return self._read()[0]

    def load(self, account):
        return [e for e in self.all() if e.account == account]

    def version(self, account):
        return len(self.load(account))

    def append(self, events, expected):
        existing, good_size = self._read()
        versions = {}
        for e in existing:
            versions[e.account] = e.version
        for account, _, _ in events:
            if account not in expected:
                raise ConcurrencyError(f"no expected version given for account {account!r}")
        for account, want in expected.items():
            if versions.get(account, 0) != want:
                raise ConcurrencyError(
                    f"account {account!r} is at version {versions.get(account, 0)}, expected {want}"
                )
        seq = len(existing)
        new = []
        for account, type_, data in events:
            seq += 1
            versions[account] = versions.get(account, 0) + 1
            new.append(Event(seq, account, versions[account], type_, dict(data)))
        payload = "".join(json.dumps(e.to_dict()) + "\n" for e in new).encode()
        with open(self.path, "r+b") as f:
            f.seek(good_size)
            f.truncate()
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        return new
