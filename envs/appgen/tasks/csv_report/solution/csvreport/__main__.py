"""Command line: python -m csvreport FILE --group-by COL [--metric M ...]."""

import argparse
import sys

from csvreport.aggregate import summarize
from csvreport.errors import ReportError
from csvreport.reader import read_rows
from csvreport.render import render


def main(argv=None):
    parser = argparse.ArgumentParser(prog="csvreport")
    parser.add_argument("file")
    parser.add_argument("--group-by", required=True)
    parser.add_argument("--metric", action="append", dest="metrics")
    parser.add_argument("--format", default="markdown")
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    try:
        rows = read_rows(args.file)
        report = summarize(rows, args.group_by, args.metrics or ["count"])
        text = render(report, args.format)
    except (ReportError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
