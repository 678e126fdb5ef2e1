"""Finding the final answer in a model's reply.

Three ways of stating a final answer are recognised, in this order of priority:

1. ``\\boxed{...}`` (also ``\\fbox{...}`` and ``\\boxed 5``): the box format.
2. A line ``Answer: ...`` (DAPO's format; ``**Final Answer:** ...`` works too).
3. A phrase ``the (final) answer is ...``, used only when neither of the above occurs.

The reply's *final-answer statements* are every boxed answer and the last ``Answer:``
line (one that holds a box is that box), each with its place in the reply and the label
written just before it (``x = \\boxed{2}``). When the reply has a ``</think>`` mark,
only the statements after the last one count (when there are any): the thinking is
exploration, the text after it is the answer. Which statements are *the* final answer
(self-correction, hedging, answers spread over several boxes) is decided by
:mod:`agentgym.envs.math.final`.

Everything here is linear in the length of the reply (one pass for braces, regular
expressions without nested quantifiers), so extraction is never the slow part of
grading, whatever the input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "Extraction",
    "Statement",
    "extract_answer",
    "find_boxed",
    "find_boxed_spans",
    "remove_boxes",
    "strip_boxed",
]

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# "Answer:" anywhere on a line, with markdown emphasis around it; possessive quantifiers
# keep it linear on hostile runs of spaces/asterisks.
_ANSWER_LINE_RE = re.compile(r"(?i)(?<![A-Za-z])answer[ \t*_]*+[:：][ \t*_]*+([^\n]*)")
_PHRASE_RE = re.compile(r"(?i)(?:final answer|the answer) (?:is|=)[ \t:*_]*+([^\n]*)")
_SENTENCE_END_RE = re.compile(r"\.(?=\s|$)")
_THINK_END = "</think>"
_BRACE_RE = re.compile(r"\\[\s\S]|[{}]")
# "x = ", "a_{1}=", "PQ =", "\\theta =" written just before a box (math delimiters allowed)
_LABEL_BEFORE_RE = re.compile(
    r"(?<![A-Za-z\\])((?:\\[A-Za-z]+|[A-Za-z]{1,6})(?:_\{?[A-Za-z0-9]{1,4}\}?)?)"
    r"\s{0,3}=\s{0,3}(?:\$|\\\(|\\\[)?\s{0,3}$"
)


@dataclass(frozen=True)
class Statement:
    """One final-answer statement of a reply.

    Attributes:
        text: the answer as stated (a box's content, or an answer line's text).
        format: ``"boxed"``, ``"answer_line"`` or ``"phrase"``.
        start, end: where the whole statement (``\\boxed{...}`` included) lies in the
            reply.
        label: the name written just before a box (``"x"`` for ``x = \\boxed{2}``), else
            ``None``.
    """

    text: str
    format: str
    start: int
    end: int
    label: str | None = None


@dataclass(frozen=True)
class Extraction:
    """What :func:`extract_answer` found.

    Attributes:
        answer: the final answer (the last box, else the last answer line, else the
            phrase), stripped of surrounding ``$``/markdown; ``None`` when none was found
            or the statement was empty.
        format: ``"boxed"``, ``"answer_line"``, ``"phrase"`` or ``None``.
        candidates: every distinct final-answer statement (the answer first).
        formats: every format that states a final answer in the reply (a reply may box
            its answer and also end with an ``Answer:`` line).
        reason: ``None`` when an answer was found, else ``"no_answer"`` or
            ``"empty_answer"``.
        statements: every final-answer statement in the order of the reply.
        text: the reply (for the text between statements).
    """

    answer: str | None
    format: str | None
    candidates: tuple[str, ...] = ()
    reason: str | None = None
    formats: tuple[str, ...] = ()
    statements: tuple[Statement, ...] = ()
    text: str = ""


def _matching_braces(text: str) -> dict[int, int]:
    """Map each ``{`` position to its matching ``}`` in one pass (``\\{``/``\\}`` skipped)."""
    match: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_RE.finditer(text):  # only braces and escapes, not every character
        c = m.group()
        if c == "{":
            stack.append(m.start())
        elif c == "}" and stack:
            match[stack.pop()] = m.start()
    return match


def find_boxed_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, content)`` of every outermost ``\\boxed{...}``/``\\fbox{...}``.

    ``start``/``end`` cover the whole box (command to closing brace). A box nested inside
    another box is part of the outer one's content. An unclosed box (a truncated reply)
    is ignored. ``\\boxed 5`` takes the next token.
    """
    if "\\boxed" not in text and "\\fbox" not in text:
        return []
    braces: dict[int, int] | None = None
    out: list[tuple[int, int, str]] = []
    covered = -1  # end of the last box taken; boxes starting before it are nested
    for m in _BOX_RE.finditer(text):
        if m.start() < covered:
            continue
        j = m.end()
        while j < len(text) and text[j] in " \t":
            j += 1
        if j < len(text) and text[j] == "{":
            if braces is None:
                braces = _matching_braces(text)
            end = braces.get(j)
            if end is None:
                continue
            out.append((m.start(), end + 1, text[j + 1 : end]))
            covered = end
        elif j > m.end():  # "\boxed 5": one token up to whitespace or "$"
            tok = re.match(r"[^\s$]+", text[j:])
            if tok:
                out.append((m.start(), j + tok.end(), tok.group(0)))
                covered = j + tok.end()
    return out


def find_boxed(text: str) -> list[str]:
    """Contents of every outermost ``\\boxed{...}``/``\\fbox{...}`` in order (see
    :func:`find_boxed_spans`)."""
    return [content for _, _, content in find_boxed_spans(text)]


def strip_boxed(text: str) -> str:
    """If ``text`` is exactly one box (possibly inside ``$``), return its content."""
    t = text.strip().strip("$").strip()
    for _ in range(4):
        m = _BOX_RE.match(t)
        if not m:
            break
        rest = t[m.end() :].lstrip()
        if not rest.startswith("{"):
            break
        end = _matching_braces(rest).get(0)
        if end is None or rest[end + 1 :].strip():
            break
        t = rest[1:end].strip()
    return t


def _clean_statement(s: str) -> str:
    """Strip markdown emphasis, math delimiters and a final full stop from a statement."""
    s = s.strip()
    for _ in range(3):
        before = s
        s = s.strip("*_ \t")
        if s.endswith("."):
            s = s[:-1].rstrip()
        if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
            s = s.strip("$").strip()
        if s.startswith("\\(") and s.endswith("\\)"):
            s = s[2:-2].strip()
        if s.startswith("\\[") and s.endswith("\\]"):
            s = s[2:-2].strip()
        if s == before:
            break
    return s


def _last_answer_line(text: str) -> tuple[int, int, str, bool] | None:
    """``(start, end, answer, boxed)`` of the last ``Answer:`` line, or None."""
    last = None
    for m in _ANSWER_LINE_RE.finditer(text):
        last = m
    if last is None:
        return None
    content = last.group(1)
    boxes = find_boxed(content)
    if boxes:
        return last.start(), last.end(), boxes[-1].strip(), True
    return last.start(), last.end(), _clean_statement(content), False


def _label_before(text: str, start: int) -> str | None:
    m = _LABEL_BEFORE_RE.search(text[max(0, start - 40) : start])
    return m.group(1) if m else None


def _phrase(text: str) -> str | None:
    last = None
    for m in _PHRASE_RE.finditer(text):
        last = m
    if last is None:
        return None
    content = last.group(1)
    boxes = find_boxed(content)
    if boxes:
        return boxes[-1].strip()
    content = content.strip()
    # Cut at the end of the sentence (a full stop followed by space or end), but keep
    # decimal points and a stop inside $...$.
    if content.startswith("$"):
        end = content.find("$", 1)
        if end > 0:
            return _clean_statement(content[: end + 1])
    m = _SENTENCE_END_RE.search(content)
    if m:
        content = content[: m.start()]
    return _clean_statement(content)


def _key(s: str) -> str:
    return "".join(s.split())


def _statements(text: str, offset: int) -> list[Statement]:
    out = [
        Statement(c.strip(), "boxed", offset + a, offset + b, _label_before(text, a))
        for a, b, c in find_boxed_spans(text)
    ]
    line = _last_answer_line(text)
    if line is not None and not line[3]:  # a line that holds a box is that box
        out.append(Statement(line[2], "answer_line", offset + line[0], offset + line[1]))
        out.sort(key=lambda st: st.start)
    return out


def extract_answer(text: str) -> Extraction:
    """Find the final answer of ``text`` (see the module docstring for the rules)."""
    offset = 0
    think_end = text.rfind(_THINK_END)
    statements: list[Statement] = []
    if think_end >= 0:
        offset = think_end + len(_THINK_END)
        statements = _statements(text[offset:], offset)
    if not statements:
        offset = 0
        statements = _statements(text, 0)
    boxes = [st for st in statements if st.format == "boxed"]
    line = _last_answer_line(text[offset:])
    if not statements:
        phrase = _phrase(text[offset:])
        if phrase is not None:
            statements = [Statement(phrase, "phrase", len(text), len(text))]
    if not statements:
        return Extraction(None, None, (), "no_answer", text=text)
    present = {st.format for st in statements}
    if line is not None and line[3]:
        present.add("answer_line")  # "Answer: \\boxed{5}" is in both formats
    formats = tuple(f for f in ("boxed", "answer_line", "phrase") if f in present)
    if boxes:
        fmt, answer = "boxed", boxes[-1].text
    else:
        fmt, answer = statements[-1].format, statements[-1].text
    if any(not st.text for st in statements):
        return Extraction(None, fmt, (), "empty_answer", formats, tuple(statements), text)
    seen: dict[str, str] = {}
    for st in statements:
        seen.setdefault(_key(st.text), st.text)
    # the chosen answer first, then the other distinct statements
    ordered = [answer] + [s for k, s in seen.items() if k != _key(answer)]
    return Extraction(answer, fmt, tuple(ordered), None, formats, tuple(statements), text)


def remove_boxes(text: str) -> str:
    """``text`` with every ``\\boxed{X}``/``\\fbox{X}`` replaced by ``X``."""
    for _ in range(8):  # nested boxes: one level per pass
        new = _remove_outer_boxes(text)
        if new == text:
            break
        text = new
    return text


def _remove_outer_boxes(text: str) -> str:
    if "\\boxed" not in text and "\\fbox" not in text:
        return text
    braces = _matching_braces(text)
    out: list[str] = []
    pos = 0
    for m in _BOX_RE.finditer(text):
        if m.start() < pos:
            continue
        j = m.end()
        while j < len(text) and text[j] in " \t":
            j += 1
        end = braces.get(j) if j < len(text) and text[j] == "{" else None
        if end is None:
            continue
        out.append(text[pos : m.start()])
        out.append(text[j + 1 : end])
        pos = end + 1
    out.append(text[pos:])
    return "".join(out)
