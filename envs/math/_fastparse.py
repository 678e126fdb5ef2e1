"""A small, fast reader for plain LaTeX expressions, run inside grading workers only.

math-verify parses LaTeX with an ANTLR grammar that costs 5-20 ms per answer, most of
a symbolic check. Answers in RL are mostly plain expressions: polynomials, fractions,
radicals, multiples of pi. :func:`read` reads exactly that subset into a sympy
expression in well under a millisecond, and returns ``None`` for anything else, which
then goes through math-verify as before:

* integers (no decimals: math-verify's float rules apply to those), single-letter
  variables (``x``, ``x_1``), ``\\pi``, ``e`` (Euler's number, as math-verify reads it),
  ``i`` (left as a symbol; :mod:`agentgym.envs.math._evaluate` reads it as the
  imaginary unit);
* ``+ - * / ^``, ``\\cdot``, ``\\times``, implicit products (``2x``, ``x(x+1)``),
  parentheses and braces, ``\\frac{a}{b}``, ``\\sqrt{a}``, ``\\sqrt[n]{a}``;
* LaTeX exponent rules: ``x^23`` is ambiguous and refused, ``x^{23}`` is read;
  ``a/b c`` (a product after a slash) is refused, and so are runs of three or more
  letters (words).

Bounds: 300 characters, integers of at most 40 digits, integer exponents of at most
1000 in absolute value; no name is ever evaluated (there is no ``eval``).
"""

from __future__ import annotations

import re
from typing import Any

import sympy

__all__ = ["read"]

MAX_CHARS = 300
_TOKEN_RE = re.compile(r"\s*(\\[A-Za-z]+|\d+|[A-Za-z](?:_\{?\d{1,3}\}?)?|[-+*/^(){}\[\]])")
_START = frozenset("({")
_FUNCS = {"\\frac", "\\dfrac", "\\tfrac", "\\sqrt", "\\pi"}


class _Refuse(Exception):
    """The text is outside the subset."""


class _Reader:
    def __init__(self, tokens: list[str]) -> None:
        self.toks = tokens
        self.i = 0

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise _Refuse
        self.i += 1
        return tok

    def expr(self) -> Any:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def _starts_factor(self, tok: str | None) -> bool:
        if tok is None:
            return False
        return tok in _START or tok in _FUNCS or tok[0].isalnum()

    def term(self) -> Any:
        value = self.signed()
        while True:
            tok = self.peek()
            if tok in ("*", "\\cdot", "\\times"):
                self.take()
                value = value * self.signed()
            elif tok == "/":
                self.take()
                value = value / self.power()
                if self._starts_factor(self.peek()):
                    raise _Refuse  # "1/2x": a product after a slash is ambiguous
            elif self._starts_factor(tok):
                value = value * self.power()
            else:
                return value

    def signed(self) -> Any:
        if self.peek() in ("+", "-"):
            op = self.take()
            value = self.signed()
            return -value if op == "-" else value
        return self.power()

    def power(self) -> Any:
        base = self.atom()
        if self.peek() != "^":
            return base
        self.take()
        tok = self.peek()
        if tok == "{":
            self.take()
            exp = self.expr()
            self.take("}")
        elif tok is not None and tok.isdigit():
            if len(tok) > 1:
                raise _Refuse  # "x^23" is x^2 3 in LaTeX; too easy to misread
            exp = sympy.Integer(self.take())
        elif tok is not None and len(tok) == 1 and tok.isalpha():
            exp = self._letter(self.take())
        else:
            raise _Refuse
        if exp.is_Integer and abs(int(exp)) > 1000:
            raise _Refuse
        return sympy.Pow(base, exp)

    def _letter(self, tok: str) -> Any:
        if tok == "e":
            return sympy.E
        return sympy.Symbol(tok.replace("{", "").replace("}", ""))

    def atom(self) -> Any:
        tok = self.take()
        if tok.isdigit():
            if len(tok) > 40:
                raise _Refuse
            return sympy.Integer(tok)
        if tok[0].isalpha():
            return self._letter(tok)
        if tok in ("(", "{"):
            value = self.expr()
            self.take(")" if tok == "(" else "}")
            return value
        if tok == "\\pi":
            return sympy.pi
        if tok in ("\\frac", "\\dfrac", "\\tfrac"):
            num = self.group()
            return num / self.group()
        if tok == "\\sqrt":
            if self.peek() == "[":
                self.take()
                index = self.expr()
                self.take("]")
                return sympy.root(self.group(), index)
            return sympy.sqrt(self.group())
        raise _Refuse

    def group(self) -> Any:
        self.take("{")
        value = self.expr()
        self.take("}")
        return value


def read(text: str) -> Any | None:
    """The sympy expression of a plain LaTeX expression, or ``None`` outside the subset."""
    if not text or len(text) > MAX_CHARS or "." in text:
        return None
    pos = 0
    tokens: list[str] = []
    for m in _TOKEN_RE.finditer(text):
        if m.start() != pos:
            return None
        tokens.append(m.group(1))
        pos = m.end()
    if pos != len(text.rstrip()):
        return None
    run = 0
    for tok in tokens:
        if tok.startswith("\\") and tok not in _FUNCS and tok not in ("\\cdot", "\\times"):
            return None
        run = run + 1 if len(tok) == 1 and tok.isalpha() else 0
        if run > 2:
            return None  # "abc" or a word: math-verify's reading stands
    reader = _Reader(tokens)
    try:
        value = reader.expr()
        if reader.peek() is not None:
            return None
    except (_Refuse, ZeroDivisionError, TypeError, ValueError, RecursionError):
        return None
    if not isinstance(value, sympy.Expr) or value.has(sympy.zoo, sympy.nan):
        return None
    return value
