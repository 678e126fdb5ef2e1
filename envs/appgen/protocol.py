"""The AppGen action protocol: parsing an assistant reply into actions.

A reply may hold any number of actions, executed in order; text outside them is ignored
(the agent may think aloud)::

    <write path="app/models.py">
    ...the whole new content of the file...
    </write>
    <delete path="old.py"/>
    <read path="app/db.py"/>
    <run>python3 -m pytest -q tests</run>
    <run timeout="60">python3 -m app --help</run>
    <submit/>

Rules:

* ``write`` replaces (or creates) the file with the text between the tags. One newline
  right after the opening tag and one right before the closing tag are dropped, and so is
  a Markdown code fence wrapping the whole content. The content cannot contain the text
  ``</write>``.
* ``read``, ``delete`` and ``submit`` may be written ``<x .../>`` or ``<x ...></x>``.
* Paths are relative to the project root, use ``/``, and may not be absolute, contain
  ``..``, backslashes or control characters.
* ``submit`` ends the episode: the project is graded; actions after it are ignored.

Problems (a missing path, an unclosed tag, an unknown attribute, an unknown action tag
such as ``<file path=...>``) become :class:`ActionError` items in the parsed list, so the
environment can report them in its next observation; parsing never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ACTION_NAMES = ("write", "delete", "read", "run", "submit")
MAX_PATH_LENGTH = 200

_OPEN = re.compile(r"<(write|delete|read|run|submit)(?=[\s/>])([^<>]*?)(/?)>", re.IGNORECASE)
_NEAR_MISS = re.compile(r"<([A-Za-z_][\w-]*)\s+path\s*=", re.IGNORECASE)
_ATTR = re.compile(r"""\s*([A-Za-z_][\w-]*)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_FENCE = re.compile(r"\A```[^\n`]*\n(.*?)\n?```\s*\Z", re.DOTALL)
_ALLOWED_ATTRS = {
    "write": {"path"},
    "delete": {"path"},
    "read": {"path"},
    "run": {"timeout"},
    "submit": set(),
}


@dataclass(frozen=True)
class Write:
    path: str
    content: str


@dataclass(frozen=True)
class Delete:
    path: str


@dataclass(frozen=True)
class Read:
    path: str


@dataclass(frozen=True)
class Run:
    command: str
    timeout: float | None = None


@dataclass(frozen=True)
class Submit:
    pass


@dataclass(frozen=True)
class ActionError:
    """A malformed action; ``message`` says what was wrong and how to write it."""

    message: str


Action = Write | Delete | Read | Run | Submit | ActionError

_EXAMPLES = {
    "write": '<write path="pkg/module.py">\n...file content...\n</write>',
    "delete": '<delete path="pkg/old.py"/>',
    "read": '<read path="pkg/module.py"/>',
    "run": "<run>python3 -m pytest -q tests</run>",
    "submit": "<submit/>",
}


def check_path(path: str) -> str | None:
    """Why ``path`` is not an acceptable project path, or None when it is fine."""
    if not path or not path.strip():
        return "the path is empty"
    if len(path) > MAX_PATH_LENGTH:
        return f"the path is longer than {MAX_PATH_LENGTH} characters"
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        return "the path is absolute; use a path relative to the project root"
    if "\\" in path:
        return "use '/' to separate directories, not '\\'"
    if any(ord(c) < 32 or c == "\x7f" for c in path):
        return "the path contains control characters"
    parts = path.split("/")
    if ".." in parts:
        return "the path contains '..'; it may not leave the project"
    if any(p.strip() != p for p in parts if p):
        return "path parts may not start or end with spaces"
    if all(p in ("", ".") for p in parts):
        return "the path names the project root, not a file"
    return None


def normalize_path(path: str) -> str:
    """``./a//b.py`` -> ``a/b.py`` (call after :func:`check_path` accepted it)."""
    return "/".join(p for p in path.split("/") if p not in ("", "."))


def _attrs(raw: str, name: str) -> tuple[dict[str, str], str | None]:
    attrs: dict[str, str] = {}
    pos = 0
    raw = raw.rstrip()
    while pos < len(raw):
        m = _ATTR.match(raw, pos)
        if not m:
            return attrs, (
                f"could not read the attributes of <{name}{raw}>; write them as "
                f'key="value", e.g. {_EXAMPLES[name].splitlines()[0]}'
            )
        key = m.group(1).lower()
        if key not in _ALLOWED_ATTRS[name]:
            allowed = ", ".join(sorted(_ALLOWED_ATTRS[name])) or "none"
            return attrs, f"<{name}> has no attribute {key!r} (allowed: {allowed})"
        attrs[key] = m.group(2) if m.group(2) is not None else m.group(3)
        pos = m.end()
    return attrs, None


def _strip_content(text: str) -> str:
    if text.startswith("\r\n"):
        text = text[2:]
    elif text.startswith("\n"):
        text = text[1:]
    m = _FENCE.match(text.strip("\n")) if text.lstrip().startswith("```") else None
    if m:
        return m.group(1) + "\n"
    if text.endswith("\n"):
        return text  # the newline before </write> ends the file's last line
    return text


def _path_action(name: str, attrs: dict[str, str]) -> Action | None:
    if "path" not in attrs:
        return ActionError(
            f"<{name}> needs a path attribute, e.g. {_EXAMPLES[name].splitlines()[0]}"
        )
    why = check_path(attrs["path"])
    if why:
        return ActionError(f"<{name} path={attrs['path']!r}>: {why}")
    return None


def parse_actions(text: str) -> list[Action]:
    """Every action of ``text``, in order (see the module docstring)."""
    actions: list[Action] = []
    pos = 0
    lower = text.lower()
    while True:
        m = _OPEN.search(text, pos)
        stray = _NEAR_MISS.search(text, pos, m.start() if m else len(text))
        while stray:
            if stray.group(1).lower() not in ACTION_NAMES:
                actions.append(
                    ActionError(
                        f"unknown action <{stray.group(1)}>; the actions are "
                        + ", ".join(f"<{n}>" for n in ACTION_NAMES)
                    )
                )
            stray = _NEAR_MISS.search(text, stray.end(), m.start() if m else len(text))
        if not m:
            return actions
        name = m.group(1).lower()
        attrs, problem = _attrs(m.group(2), name)
        self_closing = m.group(3) == "/"
        pos = m.end()
        closing = f"</{name}>"
        if name in ("write", "run"):
            if self_closing:
                actions.append(ActionError(f"<{name}/> has no content; use {_EXAMPLES[name]}"))
                continue
            end = lower.find(closing, pos)
            if end < 0:
                actions.append(
                    ActionError(
                        f"<{name}> is not closed with {closing}; nothing after it was read. "
                        f"Use {_EXAMPLES[name]}"
                    )
                )
                return actions
            body = text[pos:end]
            pos = end + len(closing)
            if problem:
                actions.append(ActionError(problem))
                continue
            if name == "write":
                bad = _path_action(name, attrs)
                actions.append(bad or Write(normalize_path(attrs["path"]), _strip_content(body)))
            else:
                command = body.strip()
                if not command:
                    actions.append(ActionError("<run> holds no command; use " + _EXAMPLES["run"]))
                    continue
                timeout = None
                if "timeout" in attrs:
                    try:
                        timeout = float(attrs["timeout"])
                        if timeout <= 0:
                            raise ValueError
                    except ValueError:
                        actions.append(
                            ActionError(f'<run timeout="{attrs["timeout"]}">: use seconds > 0')
                        )
                        continue
                actions.append(Run(command, timeout))
            continue
        # read, delete, submit: optional explicit closing tag right after
        if not self_closing and lower.startswith(closing, pos):
            pos += len(closing)
        if problem:
            actions.append(ActionError(problem))
        elif name == "submit":
            actions.append(Submit())
        else:
            bad = _path_action(name, attrs)
            path = normalize_path(attrs.get("path", ""))
            actions.append(bad or (Read(path) if name == "read" else Delete(path)))


def protocol_help() -> str:
    """The protocol as shown in the system prompt."""
    return "\n".join(_EXAMPLES.values())
