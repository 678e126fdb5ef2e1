"""Game state and the rules of every command."""

import json

from adventure.parser import parse

WIN = "\n*** You have won! ***"


class Game:
    def __init__(self, world):
        self.world = world
        self.room = world.start
        self.inventory = []
        self.room_items = {rid: list(room.items) for rid, room in world.rooms.items()}
        self.unlocked = []
        self.moves = 0
        self.won = False

    def room_text(self):
        room = self.world.rooms[self.room]
        exits = ", ".join(sorted(room.exits)) or "none"
        text = f"{room.name}\n{room.description}\nExits: {exits}"
        items = self.room_items[self.room]
        if items:
            text += "\nYou see: " + ", ".join(sorted(items))
        return text

    def _goal_met(self):
        goal = self.world.goal
        if not goal:
            return False
        if goal.get("room") is not None and goal["room"] != self.room:
            return False
        return all(item in self.inventory for item in goal.get("carry", []))

    def execute(self, line):
        verb, obj = parse(line)
        if verb == "unknown":
            return "I don't understand that."
        self.moves += 1
        reply = getattr(self, f"_do_{verb}")(obj)
        if not self.won and self._goal_met():
            self.won = True
            reply += WIN
        return reply

    def _do_look(self, _):
        return self.room_text()

    def _do_quit(self, _):
        return "Bye."

    def _do_inventory(self, _):
        if not self.inventory:
            return "You carry nothing."
        return "You carry: " + ", ".join(sorted(self.inventory))

    def _lock_key(self, direction):
        exit_ = self.world.rooms[self.room].exits[direction]
        if exit_.locked_by and [self.room, direction] not in self.unlocked:
            return exit_.locked_by
        return None

    def _do_go(self, direction):
        exits = self.world.rooms[self.room].exits
        if direction not in exits:
            return "You can't go that way."
        if self._lock_key(direction):
            return f"The way {direction} is locked."
        self.room = exits[direction].to
        return self.room_text()

    def _do_take(self, item):
        here = self.room_items[self.room]
        if item not in here:
            return f"There is no {item} here."
        here.remove(item)
        self.inventory.append(item)
        return f"Taken: {item}"

    def _do_drop(self, item):
        if item not in self.inventory:
            return f"You don't have {item}."
        self.inventory.remove(item)
        self.room_items[self.room].append(item)
        return f"Dropped: {item}"

    def _do_examine(self, item):
        if item in self.inventory or item in self.room_items[self.room]:
            return self.world.items[item]
        return f"You see no {item}."

    def _do_unlock(self, direction):
        exits = self.world.rooms[self.room].exits
        key = self._lock_key(direction) if direction in exits else None
        if key is None:
            return "Nothing to unlock there."
        if key not in self.inventory:
            return f"You need the {key}."
        self.unlocked.append([self.room, direction])
        return "Unlocked."

    def save(self, path):
        state = {
            "room": self.room,
            "inventory": self.inventory,
            "room_items": self.room_items,
            "unlocked": self.unlocked,
            "moves": self.moves,
            "won": self.won,
        }
        with open(path, "w", encoding="utf-8") as f:
            json.dump(state, f)

    @classmethod
    def load(cls, world, path):
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
        game = cls(world)
        game.room = state["room"]
        game.inventory = list(state["inventory"])
        game.room_items = {k: list(v) for k, v in state["room_items"].items()}
        game.unlocked = [list(x) for x in state["unlocked"]]
        game.moves = state["moves"]
        game.won = state["won"]
        return game
