"""python -m logstats FILE [--since ISO] [--until ISO] [--top N] [--hourly]"""

import argparse
import json
import sys
from datetime import datetime

from logstats.parse import parse_file
from logstats.stats import filter_entries, per_hour, summarize


def main(argv=None):
    parser = argparse.ArgumentParser(prog="logstats")
    parser.add_argument("file")
    parser.add_argument("--since", type=datetime.fromisoformat)
    parser.add_argument("--until", type=datetime.fromisoformat)
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--hourly", action="store_true")
    args = parser.parse_args(argv)
    try:
        entries, malformed = parse_file(args.file)
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    entries = filter_entries(entries, since=args.since, until=args.until)
    if args.hourly:
        print(json.dumps(per_hour(entries)))
    else:
        print(json.dumps({**summarize(entries, args.top), "malformed": malformed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
