"""The event record."""

from dataclasses import dataclass, field

TYPES = (
    "AccountOpened",
    "Deposited",
    "Withdrawn",
    "TransferredOut",
    "TransferredIn",
    "AccountClosed",
)


@dataclass(frozen=True)
class Event:
    seq: int
    account: str
    version: int
    type: str
    data: dict = field(default_factory=dict)

    def to_dict(self):
        return {
            "seq": self.seq,
            "account": self.account,
            "version": self.version,
            "type": self.type,
            "data": dict(self.data),
        }

    @classmethod
    def from_dict(cls, d):
        return cls(d["seq"], d["account"], d["version"], d["type"], dict(d.get("data", {})))
