"""The action protocol: what parses, what is reported, and that parsing never raises."""

from __future__ import annotations

import random

import pytest

from agentgym.envs.appgen.protocol import (
    ActionError,
    Delete,
    Read,
    Run,
    Submit,
    Write,
    check_path,
    parse_actions,
)


def test_all_actions_in_order_with_prose_around():
    text = (
        "I will create the module.\n"
        '<write path="pkg/a.py">\nx = 1\n</write>\n'
        "Now check it: <read path='pkg/a.py'/> and remove the old one "
        '<delete path="./old//b.py"></delete>\n'
        '<run timeout="5">python3 -m pytest -q tests</run>\n'
        "<submit/>"
    )
    assert parse_actions(text) == [
        Write("pkg/a.py", "x = 1\n"),
        Read("pkg/a.py"),
        Delete("old/b.py"),
        Run("python3 -m pytest -q tests", 5.0),
        Submit(),
    ]


def test_write_content_is_kept_verbatim():
    body = "def f():\n    return '<b>'  # </writer> is fine\n\n\n"
    assert parse_actions(f'<write path="f.py">\n{body}</write>') == [Write("f.py", body)]
    assert parse_actions('<write path="e.py"></write>') == [Write("e.py", "")]
    assert parse_actions('<write path="n.txt">no newline</write>') == [Write("n.txt", "no newline")]


def test_a_fence_around_the_whole_content_is_dropped():
    text = '<write path="m.py">\n```python\nprint(1)\n```\n</write>'
    assert parse_actions(text) == [Write("m.py", "print(1)\n")]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('<write path="/etc/passwd">x</write>', "absolute"),
        ('<write path="../up.py">x</write>', ".."),
        ('<write path="a\\b.py">x</write>', "'/'"),
        ("<write>x</write>", "needs a path"),
        ('<read path=""/>', "empty"),
        ('<write path="a.py">never closed', "not closed"),
        ('<run timeout="soon">ls</run>', "seconds"),
        ("<run>   </run>", "no command"),
        ('<write path="a.py" mode="x">y</write>', "no attribute 'mode'"),
        ('<file path="a.py">x</file>', "unknown action <file>"),
        ("<write/>", "no content"),
    ],
)
def test_malformed_actions_become_errors(text, fragment):
    actions = parse_actions(text)
    assert actions and isinstance(actions[0], ActionError)
    assert fragment in actions[0].message


def test_errors_do_not_stop_later_actions():
    actions = parse_actions('<read/>\n<read path="ok.py"/>')
    assert isinstance(actions[0], ActionError)
    assert actions[1] == Read("ok.py")


def test_text_without_actions_gives_nothing():
    assert parse_actions("I am not sure what to do. <b>bold</b> a < b > c") == []


def test_check_path():
    assert check_path("pkg/mod.py") is None
    assert check_path("a/./b") is None
    assert check_path("C:/x") is not None
    assert check_path("a\x00b") is not None
    assert check_path("./") is not None


def test_random_text_never_raises():
    rng = random.Random(0)
    alphabet = "<>/=\"' \nwriteadunbmis.pyx"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        for action in parse_actions(text):
            assert isinstance(action, Write | Read | Delete | Run | Submit | ActionError)
