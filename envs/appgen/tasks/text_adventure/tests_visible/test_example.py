import os

from adventure.game import Game
from adventure.world import load_world

WORLD = os.path.join(os.getcwd(), "worlds", "castle.json")


def test_start_room():
    game = Game(load_world(WORLD))
    assert game.execute("look") == (
        "Great Hall\nBanners hang over a long table.\nExits: east, north\nYou see: lamp"
    )
