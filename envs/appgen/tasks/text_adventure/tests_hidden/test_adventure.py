import json
import os
import sys

import pytest

from apptest import files, subprocess

ROOT = os.getcwd()

WORLD = {
    "start": "cell",
    "rooms": {
        "cell": {
            "name": "Cell",
            "description": "Damp stone.",
            "exits": {"north": {"to": "yard", "locked_by": "pin"}},
            "items": ["pin", "straw"],
        },
        "yard": {
            "name": "Yard",
            "description": "Open sky.",
            "exits": {"south": "cell", "west": "gate"},
        },
        "gate": {"name": "Gate", "description": "Freedom.", "exits": {}},
    },
    "items": {"pin": {"description": "A bent pin."}, "straw": {"description": "Straw."}},
    "goal": {"room": "gate"},
}


def world(data=None):
    from adventure.world import load_world

    return load_world(json.loads(json.dumps(data or WORLD)))


def test_parser():
    from adventure.parser import parse

    assert parse("N") == ("go", "north")
    assert parse("go  w") == ("go", "west")
    assert parse("walk north") == ("unknown", None)
    assert parse("Pick up the brass lamp") == ("take", "brass lamp")
    assert parse("get a key") == ("take", "key")
    assert parse("x key") == ("examine", "key")
    assert parse("i") == ("inventory", None)
    assert parse("l") == ("look", None)
    assert parse("take") == ("unknown", None)
    assert parse("   ") == ("unknown", None)
    assert parse("quit") == ("quit", None)


@pytest.mark.parametrize(
    "patch, word",
    [
        ({"start": "nowhere"}, "nowhere"),
        ({"rooms": {"cell": {"name": "C", "description": "", "exits": {"up": "attic"}}}}, "attic"),
        ({"rooms": {"cell": {"name": "C", "description": "", "items": ["sword"]}}}, "sword"),
        ({"goal": {"carry": ["crown"]}}, "crown"),
        (
            {
                "rooms": {
                    "cell": {
                        "name": "C",
                        "description": "",
                        "exits": {"up": {"to": "cell", "locked_by": "rune"}},
                    }
                }
            },
            "rune",
        ),
    ],
)
def test_world_validation(patch, word):
    from adventure.world import WorldError

    data = {**WORLD, **patch}
    with pytest.raises(WorldError, match=word):
        world(data)


def test_world_bad_json(tmp_path):
    from adventure.world import WorldError, load_world

    path = tmp_path / "w.json"
    files.write_text(path, "{nope")
    with pytest.raises(WorldError):
        load_world(str(path))


def test_locked_door_and_win():
    from adventure.game import Game

    g = Game(world())
    assert g.execute("north") == "The way north is locked."
    assert g.execute("unlock north") == "You need the pin."
    assert g.execute("unlock east") == "Nothing to unlock there."
    assert g.execute("take pin") == "Taken: pin"
    assert g.execute("unlock north") == "Unlocked."
    assert g.execute("n") == "Yard\nOpen sky.\nExits: south, west"
    assert not g.won
    assert g.execute("w") == "Gate\nFreedom.\nExits: none\n*** You have won! ***"
    assert g.won
    assert g.execute("look") == "Gate\nFreedom.\nExits: none"


def test_items_and_messages():
    from adventure.game import Game

    g = Game(world())
    assert g.execute("inventory") == "You carry nothing."
    assert g.execute("take sword") == "There is no sword here."
    assert g.execute("drop pin") == "You don't have pin."
    assert g.execute("examine pin") == "A bent pin."
    assert g.execute("examine sword") == "You see no sword."
    g.execute("take straw")
    g.execute("take pin")
    assert g.execute("i") == "You carry: pin, straw"
    assert g.execute("look") == "Cell\nDamp stone.\nExits: north"
    assert g.execute("drop straw") == "Dropped: straw"
    assert g.execute("look").endswith("You see: straw")
    assert g.execute("dance") == "I don't understand that."
    assert g.execute("south") == "You can't go that way."
    assert g.moves == 12


def test_goal_with_carry():
    from adventure.game import Game

    data = dict(WORLD, goal={"room": "cell", "carry": ["pin", "straw"]})
    g = Game(world(data))
    assert g.execute("take pin") == "Taken: pin"
    assert g.execute("take straw") == "Taken: straw\n*** You have won! ***"


def test_save_and_load(tmp_path):
    from adventure.game import Game

    w = world()
    g = Game(w)
    for cmd in ("take pin", "unlock north", "north"):
        g.execute(cmd)
    g.save(str(tmp_path / "save.json"))
    h = Game.load(w, str(tmp_path / "save.json"))
    assert h.room == "yard" and h.moves == 3
    assert h.execute("i") == "You carry: pin"
    assert h.execute("s").startswith("Cell")
    assert h.execute("n").startswith("Yard")


def test_cli_plays_castle():
    commands = "n\ntake key\nget book\ns\nunlock east\ne\ntake gold\nw\nlook\n"
    out = subprocess.run(
        [sys.executable, "-m", "adventure", "worlds/castle.json"],
        input=commands,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Great Hall\n")
    assert out.stdout.rstrip().endswith("*** You have won! ***")
    assert "Taken: book" in out.stdout
    assert "Unlocked." in out.stdout


def test_cli_bad_world(tmp_path):
    path = tmp_path / "bad.json"
    files.write_text(path, json.dumps({"start": "x", "rooms": {}}))
    out = subprocess.run(
        [sys.executable, "-m", "adventure", str(path)],
        input="",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )
    assert out.returncode == 1
    assert out.stderr.startswith("error:")
