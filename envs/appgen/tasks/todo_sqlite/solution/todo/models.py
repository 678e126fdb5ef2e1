"""Task records and validation."""

from dataclasses import asdict, dataclass, field
from datetime import date

PRIORITIES = ("low", "medium", "high")


class TodoError(Exception):
    """An invalid request: bad input or an unknown task id."""


@dataclass
class Task:
    id: int
    title: str
    priority: str = "medium"
    due: str | None = None
    done: bool = False
    tags: list[str] = field(default_factory=list)

    def to_dict(self):
        return asdict(self)


def clean_title(title):
    title = (title or "").strip()
    if not title:
        raise TodoError("the title must not be empty")
    return title


def check_priority(priority):
    if priority not in PRIORITIES:
        raise TodoError(f"priority must be one of {', '.join(PRIORITIES)}, got {priority!r}")
    return priority


def check_date(value):
    if value is None:
        return None
    try:
        return date.fromisoformat(value).isoformat()
    except (TypeError, ValueError):
        raise TodoError(f"not an ISO date (YYYY-MM-DD): {value!r}") from None
