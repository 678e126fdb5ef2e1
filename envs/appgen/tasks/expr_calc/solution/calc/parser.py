"""Recursive-descent parser producing tuples:

("num", value, pos) | ("var", name, pos) | ("neg", node, pos) | ("pos", node, pos)
("bin", op, left, right, pos) | ("call", name, args, pos) | ("assign", name, node, pos)
"""

from calc.errors import CalcError
from calc.tokens import tokenize


class Parser:
    def __init__(self, text):
        self.tokens = tokenize(text)
        self.i = 0

    @property
    def tok(self):
        return self.tokens[self.i]

    def is_op(self, *chars):
        return self.tok.kind == "op" and self.tok.value in chars

    def expect(self, char):
        if not self.is_op(char):
            raise CalcError(f"expected {char!r}", self.tok.pos)
        self.i += 1

    def fail(self):
        what = "end of input" if self.tok.kind == "end" else repr(self.tok.value)
        raise CalcError(f"unexpected {what}", self.tok.pos)

    def statement(self):
        nxt = self.tokens[self.i + 1] if self.i + 1 < len(self.tokens) else None
        if self.tok.kind == "name" and nxt is not None and nxt.kind == "op" and nxt.value == "=":
            name, pos = self.tok.value, self.tok.pos
            self.i += 2
            node = ("assign", name, self.expr(), pos)
        else:
            node = self.expr()
        if self.tok.kind != "end":
            self.fail()
        return node

    def expr(self):
        node = self.term()
        while self.is_op("+", "-"):
            op, pos = self.tok.value, self.tok.pos
            self.i += 1
            node = ("bin", op, node, self.term(), pos)
        return node

    def term(self):
        node = self.unary()
        while self.is_op("*", "/", "%"):
            op, pos = self.tok.value, self.tok.pos
            self.i += 1
            node = ("bin", op, node, self.unary(), pos)
        return node

    def unary(self):
        if self.is_op("-", "+"):
            kind = "neg" if self.tok.value == "-" else "pos"
            pos = self.tok.pos
            self.i += 1
            return (kind, self.unary(), pos)
        return self.power()

    def power(self):
        node = self.atom()
        if self.is_op("^"):
            pos = self.tok.pos
            self.i += 1
            node = ("bin", "^", node, self.unary(), pos)
        return node

    def atom(self):
        tok = self.tok
        if tok.kind == "num":
            self.i += 1
            return ("num", tok.value, tok.pos)
        if tok.kind == "name":
            self.i += 1
            if self.is_op("("):
                self.i += 1
                args = []
                if not self.is_op(")"):
                    args.append(self.expr())
                    while self.is_op(","):
                        self.i += 1
                        args.append(self.expr())
                self.expect(")")
                return ("call", tok.value, args, tok.pos)
            return ("var", tok.value, tok.pos)
        if self.is_op("("):
            self.i += 1
            node = self.expr()
            self.expect(")")
            return node
        self.fail()


def parse(text):
    return Parser(text).statement()
