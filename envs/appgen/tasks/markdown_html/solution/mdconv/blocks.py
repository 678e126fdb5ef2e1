"""Block structure: headings, fences, rules, quotes, lists, paragraphs."""

import re
from dataclasses import dataclass, field

HEADING = re.compile(r"(#{1,6}) (.*)")
ORDERED = re.compile(r"(\d+)\. (.*)")


@dataclass
class Block:
    kind: str  # heading, code, rule, quote, list, paragraph
    text: str = ""
    level: int = 0
    lang: str = ""
    lines: list = field(default_factory=list)
    items: list = field(default_factory=list)
    ordered: bool = False
    start: int = 1
    children: list = field(default_factory=list)


def _is_rule(line):
    return line.strip() in ("---", "***")


def _list_kind(line):
    if line.startswith(("- ", "* ")):
        return "ul"
    if ORDERED.match(line):
        return "ol"
    return None


def _starts_block(line):
    return (
        line.startswith("```")
        or HEADING.match(line)
        or _is_rule(line)
        or line.startswith(">")
        or _list_kind(line) is not None
    )


def parse_blocks(text):
    lines = [line.rstrip("\r") for line in text.split("\n")]
    blocks = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if line.startswith("```"):
            lang = line[3:].strip()
            body = []
            i += 1
            while i < len(lines) and lines[i] != "```":
                body.append(lines[i])
                i += 1
            blocks.append(Block("code", lang=lang, lines=body))
            i += 1
            continue
        match = HEADING.match(line)
        if match:
            content = match.group(2).rstrip().rstrip("#").rstrip()
            blocks.append(Block("heading", text=content, level=len(match.group(1))))
            i += 1
            continue
        if _is_rule(line):
            blocks.append(Block("rule"))
            i += 1
            continue
        if line.startswith(">"):
            inner = []
            while i < len(lines) and lines[i].startswith(">"):
                rest = lines[i][1:]
                inner.append(rest[1:] if rest.startswith(" ") else rest)
                i += 1
            blocks.append(Block("quote", children=parse_blocks("\n".join(inner))))
            continue
        kind = _list_kind(line)
        if kind:
            block = Block("list", ordered=kind == "ol")
            if kind == "ol":
                block.start = int(ORDERED.match(line).group(1))
            while i < len(lines) and _list_kind(lines[i]) == kind:
                item = ORDERED.match(lines[i]).group(2) if kind == "ol" else lines[i][2:]
                block.items.append(item.strip())
                i += 1
            blocks.append(block)
            continue
        para = []
        while i < len(lines) and lines[i].strip() and (not para or not _starts_block(lines[i])):
            para.append(lines[i].strip())
            i += 1
        blocks.append(Block("paragraph", text="\n".join(para)))
    return blocks
