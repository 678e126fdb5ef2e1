"""Evaluating parse trees."""

import math

from calc.errors import CalcError
from calc.parser import parse


def _log(x, base=None):
    return math.log(x) if base is None else math.log(x, base)


def _round(x, n=None):
    return round(x) if n is None else round(x, int(n))


FUNCTIONS = {
    "sqrt": (math.sqrt, 1, 1),
    "abs": (abs, 1, 1),
    "sin": (math.sin, 1, 1),
    "cos": (math.cos, 1, 1),
    "min": (min, 1, None),
    "max": (max, 1, None),
    "round": (_round, 1, 2),
    "log": (_log, 1, 2),
}


def format_value(value):
    if isinstance(value, int):
        return str(value)
    return f"{value:.12g}"


class Calculator:
    def __init__(self):
        self.variables = {"pi": math.pi, "e": math.e}

    def evaluate(self, text):
        value = self._eval(parse(text))
        self.variables["ans"] = value
        return value

    def _eval(self, node):
        kind = node[0]
        if kind == "num":
            return node[1]
        if kind == "var":
            if node[1] not in self.variables:
                raise CalcError(f"unknown variable {node[1]!r}", node[2])
            return self.variables[node[1]]
        if kind == "neg":
            return -self._eval(node[1])
        if kind == "pos":
            return +self._eval(node[1])
        if kind == "assign":
            value = self._eval(node[2])
            self.variables[node[1]] = value
            return value
        if kind == "call":
            return self._call(node[1], [self._eval(a) for a in node[2]], node[3])
        return self._binary(node[1], self._eval(node[2]), self._eval(node[3]), node[4])

    def _binary(self, op, a, b, pos):
        if op in "/%" and b == 0:
            raise CalcError("division by zero", pos)
        try:
            if op == "+":
                return a + b
            if op == "-":
                return a - b
            if op == "*":
                return a * b
            if op == "/":
                return a / b
            if op == "%":
                return a % b
            result = a**b
        except (OverflowError, ZeroDivisionError) as e:
            raise CalcError(str(e), pos) from None
        if isinstance(result, complex):
            raise CalcError("result is not a real number", pos)
        return result

    def _call(self, name, args, pos):
        if name not in FUNCTIONS:
            raise CalcError(f"unknown function {name!r}", pos)
        func, lo, hi = FUNCTIONS[name]
        if len(args) < lo or (hi is not None and len(args) > hi):
            raise CalcError(f"wrong number of arguments for {name}()", pos)
        try:
            return func(*args)
        except (ValueError, OverflowError, ZeroDivisionError) as e:
            raise CalcError(f"{name}(): {e}", pos) from None
