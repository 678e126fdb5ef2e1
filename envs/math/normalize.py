"""Normalising a final answer before it is compared.

:func:`normalize` rewrites a LaTeX/plain-text answer into a canonical string that is
still LaTeX (math-verify parses it afterwards). What it does, in order:

* unwraps ``\\boxed{}``, ``$...$``, ``\\(...\\)``, ``\\[...\\]``, ``\\displaystyle``,
  ``\\left``/``\\right``;
* ``\\dfrac``/``\\tfrac`` -> ``\\frac``, ``\\frac12`` -> ``\\frac{1}{2}``; unicode
  ``−``, ``×``, ``÷``, ``π``, ``∞``, ``√``, ``≤``, ``≥`` -> LaTeX;
* thousands separators (``1,000``, ``1{,}000``, ``1\\,000``, ``1 000``) are removed;
* degrees (``^\\circ``, ``°``), currency (``\\$``, ``$``) and trailing units
  (``5\\text{ cm}``, ``12 apples``, ``3 km/h``, ``5\\text{ cm}^2``) are dropped; inside a
  trigonometric function a degree becomes radians (``\\sin 30^\\circ`` ->
  ``\\sin(\\frac{30\\pi}{180})``); ``%``, ``percent`` -> ``\\%`` (kept: whether 50% may
  equal 0.5 is decided when comparing);
* ``\\varnothing``, ``\\{\\}``, "no solution" -> ``\\emptyset``; "all real numbers",
  ``\\mathbb{R}`` -> ``(-\\infty,\\infty)``; a plain mixed number ``2 1/2`` ->
  ``2\\frac{1}{2}``; a trailing ``\\pmod{7}`` is dropped; a one-row or one-column
  ``pmatrix`` (a vector) becomes a tuple;
* inequalities joined by "or" (``x < -1 \\text{ or } x > 2``) become a union of
  intervals (``(-\\infty,-1)\\cup(2,\\infty)``);
* ``\\text{}``, ``\\textbf{}``, ``\\mathrm{}``, ``\\mbox{}``... are unwrapped;
* "or"/"and"/``\\lor`` between alternatives become commas, so "3 or 4" is the list
  ``3,4`` (never the single value 3);
* ``x = 3`` -> ``3`` (a single name on the left: ``x``, ``a_1``, ``f(x)``, ``\\theta``);
  ``x = 2 or x = 3`` -> ``2,3``; ``x = 6/2 = 3`` -> ``3``; ``x \\in (1, 2)`` -> ``(1,2)``.
  Names also include ``PQ``, ``x_{1}``, ``f(2)``, ``\\angle ABC``. Lists of assignments to
  *different* names (``x=2, y=3``) are kept (see :mod:`agentgym.envs.math.labels`);
* whitespace is removed except where it separates a command from a letter
  (``\\pi r``); a final full stop and a leading ``+`` are dropped.

All rewrites are regular expressions without nested quantifiers (linear time).
"""

from __future__ import annotations

import re

from agentgym.envs.math.extract import strip_boxed

__all__ = [
    "MAX_INLINE_CHARS",
    "NAME_RE",
    "UNITS",
    "align_assignments",
    "has_degrees",
    "looks_costly",
    "normalize",
    "split_top_level",
    "top_level_equals",
]

#: Answers longer than this are normalised and compared in a worker process (under the
#: time bound), never in the caller: a few linear passes over a 200k-character answer
#: already cost a good part of a second in Python.
MAX_INLINE_CHARS = 2000


def _words(text: str) -> frozenset[str]:
    return frozenset(re.findall(r"\S+", text))


#: Unit words dropped after a value (lower case). Words of four or more letters that
#: are not maths words are dropped too ("12 apples").
UNITS = _words(
    """
    m cm mm km dm um nm in inch inches ft foot feet yd yard yards mi mile miles
    g kg mg lb lbs oz ton tons t l ml cl dl liter liters litre litres gal gallon gallons
    s sec secs second seconds min mins minute minutes h hr hrs hour hours day days
    week weeks month months year years yr yrs
    cent cents dollar dollars euro euros pound pounds usd eur
    unit units sq square cubic cu deg degree degrees rad radian radians
    mph kph kmh km/h m/s cm/s ft/s mi/h per each times ways people students
    point points meter meters metre metres centimeter centimeters centimetres
    millimeter millimeters kilometer kilometers kilogram kilograms gram grams
    """
)
# Words that must survive at the end of an answer even though they are long.
_KEEP_WORDS = _words("true false none undefined infinity even odd real all no yes")
_MULTI_LETTER_UNITS = frozenset(u for u in UNITS if len(u) >= 2 and u.isalpha())

_UNICODE = {
    "−": "-",
    "–": "-",
    "×": "\\times ",
    "·": "\\cdot ",
    "÷": "\\div ",
    "π": "\\pi ",
    "∞": "\\infty ",
    "√": "\\sqrt",
    "≤": "\\le ",
    "≥": "\\ge ",
    "≠": "\\ne ",
    "°": "^\\circ",
    "\u00a0": " ",
    "\u2009": " ",
    "\u202f": " ",
}
_UNICODE_RE = re.compile("|".join(re.escape(k) for k in _UNICODE))

_TEXT_CMD_RE = re.compile(
    r"\\(?:text|textbf|textit|textrm|textsf|texttt|textnormal|mathrm|mathbf|mathit|"
    r"mathsf|mathtt|mbox|hbox|operatorname)\s*\{([^{}]*)\}"
)
_SIZE_CMD_RE = re.compile(
    r"\\(?:left|right|bigl|bigr|Bigl|Bigr|biggl|biggr|big|Big|bigg|Bigg)(?![A-Za-z])"
)
_SPACING_RE = re.compile(
    r"\\(?:quad|qquad|enspace|thinspace|medspace|thickspace)(?![A-Za-z])|(?<!\\)\\[,;:! ]|~"
)
_DEGREE_RE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\degree(?![A-Za-z])|\\circ(?![A-Za-z])")
_ALT_RE = re.compile(
    r"\s*(?:\\lor(?![A-Za-z])|\\vee(?![A-Za-z])|(?<![A-Za-z\\])(?:or|and)(?![A-Za-z]))\s*"
)
_THOUSANDS_RE = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_THOUSANDS_SPACE_RE = re.compile(r"[+-]?\d{1,3}(?: \d{3})+(?:\.\d+)?")
# a label: x, x_1, x_{10}, PQ, f(x), f(2), \theta, \theta_0, \angle ABC, m\angle A
_NAME = (
    r"(?:(?:[A-Za-z]{1,8}|\\[A-Za-z]+)(?:_\{?[A-Za-z0-9]{1,4}\}?)?(?:\([A-Za-z0-9]{1,3}\))?"
    r"|m?\\angle ?[A-Z]{1,3})"
)
_NAME_RE = re.compile(_NAME)
#: A label (see :mod:`agentgym.envs.math.labels`), matched against a normalised string.
NAME_RE = _NAME_RE
_TRIG_RE = re.compile(r"\\(?:sin|cos|tan|cot|sec|csc)(?![A-Za-z])")
_DEGREE_NUMBER_RE = re.compile(
    r"(\d+(?:\.\d+)?)\s*(?:\^\s*\{?\s*\\circ\s*\}?|\\degree(?![A-Za-z]))"
)
_EMPTY_SET_RE = re.compile(r"\\varnothing(?![A-Za-z])|\\\{\s*\\\}|\\empty(?![A-Za-z])")
_MOD_SUFFIX_RE = re.compile(
    r"\s*(?:\\pmod\s*\{?\s*\w+\s*\}?|\(\s*\\(?:bmod|mod)\s*\{?\s*\w+\s*\}?\s*\)"
    r"|\(\s*mod\s+\w+\s*\))$"
)
_ALL_REALS_RE = re.compile(
    r"(?i)all\s*real\s*(?:numbers|values)?|all\s*reals|\\mathbb\s*\{?\s*R\s*\}?|\\R(?![A-Za-z])"
)
_NO_SOLUTION_RE = re.compile(r"(?i)no\s*(?:real\s*)?solutions?")
_VECTOR_RE = re.compile(r"\\begin\{pmatrix\}((?:(?!\\end\{pmatrix\}|\\begin).)*)\\end\{pmatrix\}")
_MIXED_PLAIN_RE = re.compile(r"([+-]?\d{1,12}) (\d{1,12})/(\d{1,12})")
_OR_SPLIT_RE = re.compile(
    r"\s*,?\s*(?:\\lor(?![A-Za-z])|\\vee(?![A-Za-z])|(?<![A-Za-z\\])or(?![A-Za-z]))\s*"
)
_REL = r"(<|>|\\leq?(?:slant)?(?![A-Za-z])|\\geq?(?:slant)?(?![A-Za-z]))"
_BOUND = r"([^<>=\\]*(?:\\(?!le|ge)[A-Za-z]+[^<>=\\]*)*)"
_INEQ_NAME = r"([A-Za-z](?:_\{?[A-Za-z0-9]{1,4}\}?)?)"
_INEQ_RIGHT_RE = re.compile(r"\s*" + _INEQ_NAME + r"\s*" + _REL + r"\s*" + _BOUND + r"\s*")
_INEQ_LEFT_RE = re.compile(r"\s*" + _BOUND + r"\s*" + _REL + r"\s*" + _INEQ_NAME + r"\s*")
_INEQ_BOTH_RE = re.compile(
    r"\s*" + _BOUND + r"\s*" + _REL + r"\s*" + _INEQ_NAME + r"\s*" + _REL + r"\s*" + _BOUND
)
_IN_PREFIX_RE = re.compile(r"^" + _NAME + r"\s*\\in\s*")
_UNIT_TOKEN_RE = re.compile(r"[A-Za-z]+(?:/[A-Za-z]+)?\.?(?:\^\{?\d\}?)?")
_SQRT_SHORT_RE = re.compile(r"\\sqrt\s*(\d)")
_SCRIPT_BRACES_RE = re.compile(r"([\^_])\{([A-Za-z0-9])\}")  # x^{2} -> x^2, a_{1} -> a_1
_FRAC_SHORT_RE = re.compile(r"\\frac\s*(\d)\s*(\d)")
_FRAC_HALF_SHORT_RE = re.compile(r"\\frac\s*\{([^{}]*)\}\s*(\d)")
_PROTECT_RE = re.compile(r"(\\[A-Za-z]+) +(?=[A-Za-z])")
_MATRIX_ENV_RE = re.compile(r"\\(begin|end)\{(?:bmatrix|Bmatrix|smallmatrix)\}")
# "[\begin{matrix}...\end{matrix}]" (sympy's latex, after \left/\right are dropped)
_BRACKETED_MATRIX_RE = re.compile(
    r"[\[(]\s*\\begin\{matrix\}((?:(?!\\end\{matrix\}).)*)\\end\{matrix\}\s*[\])]", re.S
)
_RELATION_EQ_RE = re.compile(r"(?<![<>!=\\])=(?!=)")


def split_top_level(s: str, sep: str = ",") -> list[str]:
    """Split ``s`` at ``sep`` characters outside brackets (any of ``([{`` vs ``)]}``)."""
    parts: list[str] = []
    depth = 0
    start = 0
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if c == "\\" and i + 1 < n:
            nxt = s[i + 1]
            if nxt in "{}":
                depth += 1 if nxt == "{" else -1
            i += 2
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(s[start:i])
            start = i + 1
        i += 1
    parts.append(s[start:])
    return parts


def top_level_equals(s: str) -> list[str]:
    """Split ``s`` at ``=`` signs outside brackets (``<=``, ``>=``, ``!=`` and ``==`` kept)."""
    out: list[str] = []
    depth = 0
    start = 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif (
            c == "="
            and depth == 0
            and (i == 0 or s[i - 1] not in "<>!=\\")
            and (i + 1 >= len(s) or s[i + 1] != "=")
        ):
            out.append(s[start:i])
            start = i + 1
    out.append(s[start:])
    return out


def _strip_delimiters(s: str) -> str:
    for _ in range(4):
        before = s
        s = strip_boxed(s).strip()
        if s.startswith("\\(") and s.endswith("\\)"):
            s = s[2:-2].strip()
        if s.startswith("\\[") and s.endswith("\\]"):
            s = s[2:-2].strip()
        s = s.strip("$").strip()
        if s.endswith("."):
            s = s[:-1].rstrip()
        if s == before:
            break
    return s


def _is_unit_word(tok: str) -> bool:
    word = tok.rstrip(".").split("^")[0].lower()
    if word in UNITS:
        return True
    return "/" not in word and len(word) >= 4 and word.isalpha() and word not in _KEEP_WORDS


def _drop_trailing_units(s: str) -> str:
    # "5 cm", "12 apples", "3 km/h", "20 square meters": drop unit words after a value
    # (the token before them must end a number or a group, so "n + m" is kept)
    tokens = [t for t in s.split(" ") if t]
    k = len(tokens)
    while k > 1 and _UNIT_TOKEN_RE.fullmatch(tokens[k - 1]) and _is_unit_word(tokens[k - 1]):
        k -= 1
    if k < len(tokens):
        last = tokens[k - 1][-1:]
        one_letter = any(len(t.rstrip(".").split("^")[0]) == 1 for t in tokens[k:])
        if last.isdigit() or (last in ("}", ")") and not one_letter):
            tokens = tokens[:k]
    s = " ".join(tokens)
    # "5cm" (no space) for multi-letter units only: "5m" may be a product
    m = re.fullmatch(r"([+-]?\d+(?:\.\d+)?)([A-Za-z]+)(\^\{?\d\}?)?", s)
    if m and m.group(2).lower() in _MULTI_LETTER_UNITS:
        s = m.group(1)
    return s


def _strip_name(part: str) -> tuple[str | None, str]:
    """``"x = 3"`` -> ("x", "3"); a chain ``x = 6/2 = 3`` -> ("x", "3")."""
    pieces = top_level_equals(part)
    if len(pieces) >= 2:
        lhs = pieces[0].strip()
        if _NAME_RE.fullmatch(lhs):
            return lhs, pieces[-1].strip()
    return None, part


def _strip_assignments(s: str) -> str:
    if "=" not in s:
        return s
    parts = split_top_level(s)
    named = [_strip_name(p) for p in parts]
    names = {n for n, _ in named if n is not None}
    if len(names) == 1 and all(n is not None for n, _ in named):
        return ",".join(v for _, v in named)
    if len(parts) == 1:
        return named[0][1]
    return s


_MAX_PAREN_LEVELS = 32  # each level is a linear scan; deeper nesting goes to the worker


def _strip_outer_parens(s: str) -> str:
    """``((3))`` -> ``3``; a tuple or interval ``(1,2)`` keeps its brackets."""
    for _ in range(_MAX_PAREN_LEVELS):
        if not (s.startswith("(") and s.endswith(")")):
            break
        depth = 0
        close = -1
        for i, c in enumerate(s):
            depth += 1 if c == "(" else -1 if c == ")" else 0
            if depth == 0:
                close = i
                break
        if close != len(s) - 1:
            break  # "(a)(b)": the first group closes early
        inner = s[1:-1]
        if len(split_top_level(inner)) > 1:
            break
        s = inner
    return s


def _remove_spaces(s: str) -> str:
    s = _PROTECT_RE.sub(lambda m: m.group(1) + "\x00", s)
    s = s.replace(" ", "").replace("\t", "").replace("\n", "")
    return s.replace("\x00", " ")


# a^{b^c}, a^b^c, an exponent or a factorial of four digits or more, 100 digits in a row
_COSTLY_RE = re.compile(r"\^\s*\{[^{}]*\^|\^\s*\w\s*\^|\^\s*\{?\s*\d{4}|\d{4,}\s*!|\d{100}|!\s*!")


def looks_costly(answer: str) -> bool:
    """The answer has a shape whose value is astronomically large (a power tower, a
    four-digit exponent or factorial): checking it may take any amount of time, and a
    timeout on it is the answer's fault, however busy the machine."""
    return _COSTLY_RE.search(answer) is not None


def has_degrees(answer: str) -> bool:
    """The answer carries a degree sign on its value (``60^\\circ``, ``60°``), not only
    inside a trigonometric function."""
    s = _UNICODE_RE.sub(lambda m: _UNICODE[m.group(0)], answer)
    return bool(_DEGREE_RE.search(s)) and not _TRIG_RE.search(s)


def _degrees_in_trig(s: str) -> str:
    if ("circ" not in s and "degree" not in s) or not _TRIG_RE.search(s):
        return s
    return _DEGREE_NUMBER_RE.sub(r"(\\frac{\1\\pi}{180})", s)


def _is_less(rel: str) -> bool:
    return rel == "<" or rel.startswith("\\le")


def _strict(rel: str) -> bool:
    return rel in ("<", ">")


def _interval(piece: str) -> tuple[str, str] | None:
    """``x < 3`` -> ("x", "(-\\infty,3)"); ``1 \\le x < 2`` -> ("x", "[1,2)")."""
    m = _INEQ_BOTH_RE.fullmatch(piece)
    if m and m.group(1).strip() and m.group(5).strip():
        lo, r1, name, r2, hi = (g.strip() for g in m.groups())
        if _is_less(r1) != _is_less(r2):
            return None
        if not _is_less(r1):
            lo, hi, r1, r2 = hi, lo, r2, r1
        left = "(" if _strict(r1) else "["
        right = ")" if _strict(r2) else "]"
        return name, f"{left}{lo},{hi}{right}"
    m = _INEQ_RIGHT_RE.fullmatch(piece)
    if m and m.group(3).strip():
        name, rel, bound = (g.strip() for g in m.groups())
    else:
        m = _INEQ_LEFT_RE.fullmatch(piece)
        if not (m and m.group(1).strip()):
            return None
        bound, rel, name = (g.strip() for g in m.groups())
        rel = {"<": ">", ">": "<"}.get(rel, rel.replace("\\le", "\\GE").replace("\\ge", "\\le"))
        rel = rel.replace("\\GE", "\\ge")
    if _is_less(rel):
        return name, f"(-\\infty,{bound}" + (")" if _strict(rel) else "]")
    return name, ("(" if _strict(rel) else "[") + f"{bound},\\infty)"


def _or_inequalities(s: str) -> str:
    """``x < -1 or x > 2`` -> ``(-\\infty,-1)\\cup(2,\\infty)`` (one variable only)."""
    if "<" not in s and ">" not in s and "\\le" not in s and "\\ge" not in s:
        return s
    pieces = [p.strip(" ,") for p in _OR_SPLIT_RE.split(s)]
    if len(pieces) < 2 or len(pieces) > 8:
        return s
    intervals = [_interval(p) for p in pieces]
    if any(i is None for i in intervals) or len({i[0] for i in intervals}) != 1:  # type: ignore[index]
        return s
    return "\\cup".join(i[1] for i in intervals)  # type: ignore[index]


def _vector(m: re.Match[str]) -> str:
    body = m.group(1)
    rows = body.split("\\\\")
    cols = body.split("&")
    if len(rows) > 1 and "&" not in body:
        return "(" + ",".join(rows) + ")"
    if len(cols) > 1 and "\\\\" not in body:
        return "(" + ",".join(cols) + ")"
    return m.group(0)


_SPACE_RE = re.compile(r"\s")
_SPACES_RE = re.compile(r"\s+")
_PERCENT_RE = re.compile(r"(?<!\\)%")
_PERCENT_WORD_RE = re.compile(r"\s*(?<![A-Za-z\\])percent(?:age)?(?![A-Za-z])")
_LETTER_RE = re.compile(r"[A-Za-z]")
_LATEX_THOUSANDS_RE = re.compile(r"(?<=\d)\\[,!; ](?=\d{3}(?!\d))")


def _has_letters(s: str) -> bool:
    return _LETTER_RE.search(s) is not None


def _commands(s: str) -> str:
    """The rewrites of :func:`normalize` that only apply to text with LaTeX commands."""
    s = s.replace("\\displaystyle", "")
    s = _SIZE_CMD_RE.sub("", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("\\dbinom", "\\binom").replace("\\tbinom", "\\binom")
    if "matrix" in s:
        s = _MATRIX_ENV_RE.sub(r"\\\1{pmatrix}", s)
        s = _BRACKETED_MATRIX_RE.sub(r"\\begin{pmatrix}\1\\end{pmatrix}", s)
    s = _LATEX_THOUSANDS_RE.sub("", s)  # 1\,000 -> 1000
    s = _SPACING_RE.sub(" ", s)
    s = _degrees_in_trig(s)
    s = _DEGREE_RE.sub("", s)
    s = _EMPTY_SET_RE.sub(r"\\emptyset", s)
    s = s.replace("\\$", "")
    # \text{...} and friends: unwrap (innermost first)
    for _ in range(8):
        new = _TEXT_CMD_RE.sub(lambda m: f" {m.group(1)} ", s)
        if new == s:
            break
        s = new
    return s


def normalize(answer: str, *, keep_label: bool = False) -> str:
    """Canonical form of a final answer (see the module docstring). ``""`` stays ``""``.

    ``keep_label``: keep a single label (``y=5-2x`` stays an equation), for comparing
    a gold equation with an answer that is an equation too.
    """
    s = answer if answer.isascii() else _UNICODE_RE.sub(lambda m: _UNICODE[m.group(0)], answer)
    s = _strip_delimiters(s.strip())
    if "\\" in s or "~" in s:
        s = _commands(s)
    s = s.replace("{,}", ",").replace("$", "")
    if _SPACE_RE.search(s):
        s = _SPACES_RE.sub(" ", s).strip().replace(" ^", "^")  # "5 cm ^2" -> "5 cm^2"
    if "%" in s:
        s = _PERCENT_RE.sub(r"\\%", s)
    if "ercent" in s:
        s = _PERCENT_WORD_RE.sub(r"\\%", s)
    if "<" in s or ">" in s or "\\le" in s or "\\ge" in s:
        s = _or_inequalities(s)
    if "mod" in s:
        s = _MOD_SUFFIX_RE.sub("", s)
    if _has_letters(s):
        if _ALL_REALS_RE.fullmatch(s):
            s = "(-\\infty,\\infty)"
        elif _NO_SOLUTION_RE.fullmatch(s):
            s = "\\emptyset"
        if "or" in s or "and" in s or "\\vee" in s:
            s = _ALT_RE.sub(",", s).strip(",").strip()
        s = _drop_trailing_units(s)
    if "\\" in s or "^{" in s or "_{" in s:
        s = _SQRT_SHORT_RE.sub(r"\\sqrt{\1}", s)
        s = _SCRIPT_BRACES_RE.sub(r"\1\2", s)
        s = _FRAC_SHORT_RE.sub(r"\\frac{\1}{\2}", s)
        s = _FRAC_HALF_SHORT_RE.sub(r"\\frac{\1}{\2}", s)
        s = _IN_PREFIX_RE.sub("", s)
    if _THOUSANDS_RE.fullmatch(s) or _THOUSANDS_SPACE_RE.fullmatch(s):
        s = s.replace(",", "").replace(" ", "")
    elif _MIXED_PLAIN_RE.fullmatch(s):
        s = _MIXED_PLAIN_RE.sub(r"\1\\frac{\2}{\3}", s)
    s = _remove_spaces(s)
    if "pmatrix" in s:
        s = _VECTOR_RE.sub(_vector, s)
    if not keep_label:
        s = _strip_assignments(s)
    s = _strip_outer_parens(s)
    if s.endswith("."):
        s = s[:-1]
    if s.startswith("+") and len(s) > 1:
        s = s[1:]
    return s


def align_assignments(gold: str, pred: str) -> str:
    """``x=2,y=3`` against a gold tuple ``(2,3)``: the values in alphabetical order of names.

    Both arguments are normalised answers; anything else is returned unchanged.
    """
    if not (gold.startswith("(") and gold.endswith(")")):
        return pred
    parts = split_top_level(pred)
    if len(parts) < 2:
        return pred
    pairs = []
    for p in parts:
        sides = top_level_equals(p)
        if len(sides) != 2 or not _NAME_RE.fullmatch(sides[0]):
            return pred
        pairs.append((sides[0], sides[1]))
    names = [n for n, _ in pairs]
    if len(set(names)) != len(names):
        return pred
    return "(" + ",".join(v for _, v in sorted(pairs)) + ")"
