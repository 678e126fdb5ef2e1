"""Rendering report rows as CSV, JSON or Markdown."""

import json

from csvreport.errors import ReportError

FORMATS = ("csv", "json", "markdown")


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def render(rows, fmt):
    """The report as text in format ``fmt``."""
    if fmt not in FORMATS:
        raise ReportError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    if fmt == "json":
        return json.dumps(rows, indent=2) + "\n"
    if not rows:
        return ""
    columns = list(rows[0])
    if fmt == "csv":
        lines = [",".join(columns)]
        lines += [",".join(_cell(r[c]) for c in columns) for r in rows]
    else:
        lines = ["| " + " | ".join(columns) + " |"]
        lines.append("| " + " | ".join("---" for _ in columns) + " |")
        lines += ["| " + " | ".join(_cell(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"
