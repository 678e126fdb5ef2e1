"""python -m calc [-e EXPR]"""

import sys

from calc.errors import CalcError
from calc.evaluator import Calculator, format_value


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    calc = Calculator()
    if argv[:1] == ["-e"] and len(argv) == 2:
        try:
            print(format_value(calc.evaluate(argv[1])))
        except CalcError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            print(format_value(calc.evaluate(line.strip())))
        except CalcError as e:
            print(f"error: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
