"""Filtering and summarising entries."""

from collections import Counter
from datetime import timezone


def filter_entries(entries, since=None, until=None, status=None, method=None):
    out = []
    for e in entries:
        if since is not None and e.time < since:
            continue
        if until is not None and e.time > until:
            continue
        if status is not None and e.status != status:
            continue
        if method is not None and e.method.upper() != method.upper():
            continue
        out.append(e)
    return out


def summarize(entries, top=5):
    classes = Counter(f"{e.status // 100}xx" for e in entries)
    paths = Counter(e.path for e in entries)
    ranked = sorted(paths.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    errors = sum(1 for e in entries if e.status >= 400)
    return {
        "requests": len(entries),
        "hosts": len({e.host for e in entries}),
        "bytes": sum(e.size for e in entries),
        "status": dict(sorted(classes.items())),
        "top_paths": [[p, n] for p, n in ranked],
        "error_rate": round(errors / len(entries), 3) if entries else 0.0,
    }


def per_hour(entries):
    counts = Counter(e.time.astimezone(timezone.utc).strftime("%Y-%m-%dT%H") for e in entries)  # noqa: UP017
    return dict(sorted(counts.items()))
