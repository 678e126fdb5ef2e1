"""python -m mdconv [INPUT] [-o OUTPUT] [--title TITLE]"""

import argparse
import sys

from mdconv.inline import escape
from mdconv.render import to_html

TEMPLATE = (
    '<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n<title>{title}</title>\n'
    "</head>\n<body>\n{body}\n</body>\n</html>\n"
)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="mdconv")
    parser.add_argument("input", nargs="?")
    parser.add_argument("-o", "--output")
    parser.add_argument("--title")
    args = parser.parse_args(argv)
    try:
        if args.input:
            with open(args.input, encoding="utf-8") as f:
                text = f.read()
        else:
            text = sys.stdin.read()
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    result = to_html(text)
    if args.title is not None:
        result = TEMPLATE.format(title=escape(args.title), body=result.rstrip("\n"))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(result)
    else:
        sys.stdout.write(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
