"""Tokenizer."""

from dataclasses import dataclass

from calc.errors import CalcError

OPS = set("+-*/%^(),=")


@dataclass
class Token:
    kind: str
    value: object
    pos: int


def tokenize(text):
    tokens = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch.isdigit() or (ch == "." and i + 1 < len(text) and text[i + 1].isdigit()):
            start = i
            while i < len(text) and (text[i].isdigit() or text[i] == "."):
                i += 1
            raw = text[start:i]
            if raw.count(".") > 1:
                raise CalcError(f"bad number {raw!r}", start)
            tokens.append(Token("num", float(raw) if "." in raw else int(raw), start))
        elif ch.isalpha() or ch == "_":
            start = i
            while i < len(text) and (text[i].isalnum() or text[i] == "_"):
                i += 1
            tokens.append(Token("name", text[start:i], start))
        elif ch in OPS:
            tokens.append(Token("op", ch, i))
            i += 1
        else:
            raise CalcError(f"unexpected character {ch!r}", i)
    tokens.append(Token("end", None, len(text)))
    return tokens
