"""Command line interface: python -m todo --db PATH COMMAND ..."""

import argparse
import json
import sys

from todo.models import TodoError
from todo.service import TodoService


def format_task(task):
    line = f"[{'x' if task.done else ' '}] #{task.id} {task.title} ({task.priority})"
    if task.due:
        line += f" due {task.due}"
    if task.tags:
        line += " [" + ", ".join(task.tags) + "]"
    return line


def build_parser():
    parser = argparse.ArgumentParser(prog="todo")
    parser.add_argument("--db", default="todo.db")
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add")
    add.add_argument("title")
    add.add_argument("--priority", default="medium")
    add.add_argument("--due")
    add.add_argument("--tag", action="append", default=[])
    lst = sub.add_parser("list")
    which = lst.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true")
    which.add_argument("--done", action="store_true")
    lst.add_argument("--tag")
    lst.add_argument("--sort", default="id")
    lst.add_argument("--json", action="store_true")
    for name in ("done", "reopen", "delete"):
        sub.add_parser(name).add_argument("id", type=int)
    sub.add_parser("search").add_argument("text")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    service = TodoService(args.db)
    try:
        if args.command == "add":
            task = service.add(args.title, args.priority, args.due, args.tag)
            print(f"added {task.id}")
        elif args.command == "list":
            status = "all" if args.all else "done" if args.done else "open"
            tasks = service.list(status=status, tag=args.tag, order=args.sort)
            if args.json:
                print(json.dumps([t.to_dict() for t in tasks]))
            else:
                for task in tasks:
                    print(format_task(task))
        elif args.command == "search":
            for task in service.search(args.text):
                print(format_task(task))
        else:
            action = {"done": service.complete, "reopen": service.reopen, "delete": service.delete}
            action[args.command](args.id)
            verb = {"done": "completed", "reopen": "reopened", "delete": "deleted"}
            print(f"{verb[args.command]} {args.id}")
    except TodoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        service.close()
    return 0
