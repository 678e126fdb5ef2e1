"""python -m jobq --db PATH COMMAND ..."""

import argparse
import json
import sys

from jobq.errors import QueueError
from jobq.queue import JobQueue


def main(argv=None):
    parser = argparse.ArgumentParser(prog="jobq")
    parser.add_argument("--db", default="jobs.db")
    sub = parser.add_subparsers(dest="command", required=True)
    enq = sub.add_parser("enqueue")
    enq.add_argument("queue")
    enq.add_argument("payload")
    enq.add_argument("--delay", type=float, default=0)
    sub.add_parser("claim").add_argument("queue")
    sub.add_parser("complete").add_argument("id", type=int)
    fail = sub.add_parser("fail")
    fail.add_argument("id", type=int)
    fail.add_argument("message")
    sub.add_parser("stats").add_argument("queue")
    args = parser.parse_args(argv)
    q = JobQueue(args.db)
    try:
        if args.command == "enqueue":
            try:
                payload = json.loads(args.payload)
            except ValueError:
                raise QueueError(f"the payload is not valid JSON: {args.payload!r}") from None
            print(q.enqueue(args.queue, payload, args.delay))
        elif args.command == "claim":
            job = q.claim(args.queue)
            print("empty" if job is None else json.dumps(job))
        elif args.command == "complete":
            q.complete(args.id)
            print("ok")
        elif args.command == "fail":
            q.fail(args.id, args.message)
            print(q.get(args.id)["state"])
        else:
            print(json.dumps(q.stats(args.queue)))
    except QueueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        q.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
