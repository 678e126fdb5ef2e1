"""Grouping rows and computing metrics."""

from csvreport.errors import ReportError

KINDS = ("sum", "avg", "min", "max")


def _number(text, column):
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise ReportError(f"column {column!r}: {text!r} is not a number") from None


def _parse_metric(metric):
    if metric == "count":
        return "count", None
    kind, sep, column = metric.partition(":")
    if not sep or kind not in KINDS or not column:
        raise ReportError(
            f"unknown metric {metric!r}; use count, sum:COL, avg:COL, min:COL or max:COL"
        )
    return kind, column


def _compute(kind, values):
    if not values:
        return None
    if kind == "sum":
        total = sum(values)
        return total if isinstance(total, int) else round(total, 2)
    if kind == "avg":
        return round(sum(values) / len(values), 2)
    return min(values) if kind == "min" else max(values)


def summarize(rows, group_by, metrics):
    """One dict per group value, sorted, with the requested metrics."""
    parsed = [_parse_metric(m) for m in metrics]
    columns = set(rows[0]) if rows else set()
    needed = [group_by] + [c for _, c in parsed if c is not None]
    for column in needed:
        if rows and column not in columns:
            raise ReportError(f"unknown column {column!r}; columns are {sorted(columns)}")
    groups = {}
    for row in rows:
        groups.setdefault(row[group_by], []).append(row)
    result = []
    for key in sorted(groups):
        members = groups[key]
        out = {group_by: key}
        for kind, column in parsed:
            if kind == "count":
                out["count"] = len(members)
                continue
            values = [_number(r[column], column) for r in members if r[column] != ""]
            out[f"{kind}_{column}"] = _compute(kind, values)
        result.append(out)
    return result
