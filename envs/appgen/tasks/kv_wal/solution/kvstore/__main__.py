"""python -m kvstore DIR COMMAND ..."""

import sys

from kvstore.store import KVStore

USAGE = "usage: python -m kvstore DIR put KEY VALUE | get KEY | delete KEY | keys | checkpoint"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print(USAGE, file=sys.stderr)
        return 2
    store = KVStore(argv[0])
    command, args = argv[1], argv[2:]
    try:
        if command == "put" and len(args) == 2:
            store.put(args[0], args[1])
            print("ok")
        elif command == "get" and len(args) == 1:
            value = store.get(args[0])
            if value is None:
                print(f"error: key not found: {args[0]}", file=sys.stderr)
                return 1
            print(value)
        elif command == "delete" and len(args) == 1:
            if store.delete(args[0]):
                print("deleted")
            else:
                print("not found")
                return 1
        elif command == "keys" and not args:
            for key in store.keys():  # noqa: SIM118 (a method, not a dict)
                print(key)
        elif command == "checkpoint" and not args:
            store.checkpoint()
            print("ok")
        else:
            print(USAGE, file=sys.stderr)
            return 2
    except (TypeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
