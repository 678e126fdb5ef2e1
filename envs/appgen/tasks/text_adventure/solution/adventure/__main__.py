"""python -m adventure WORLD.json: play from stdin."""

import sys

from adventure.game import Game
from adventure.parser import parse
from adventure.world import WorldError, load_world


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m adventure WORLD.json", file=sys.stderr)
        return 2
    try:
        world = load_world(argv[0])
    except (WorldError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    game = Game(world)
    print(game.room_text())
    for line in sys.stdin:
        print(game.execute(line))
        if game.won or parse(line)[0] == "quit":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
