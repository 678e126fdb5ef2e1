"""Reading CSV files into rows."""

import csv

from csvreport.errors import ReportError


def read_rows(path):
    """Rows of the CSV file at ``path`` as dicts keyed by the stripped header."""
    with open(path, newline="", encoding="utf-8") as f:
        lines = f.read().splitlines()
    header = None
    rows = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        cells = [c.strip() for c in next(csv.reader([line]))]
        if header is None:
            header = cells
            continue
        if len(cells) != len(header):
            raise ReportError(f"line {lineno}: expected {len(header)} cells, found {len(cells)}")
        rows.append(dict(zip(header, cells, strict=True)))
    if header is None:
        raise ReportError(f"{path}: the file is empty (no header line)")
    return rows
