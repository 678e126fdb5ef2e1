"""Loading and validating world files."""

import json
from dataclasses import dataclass, field


class WorldError(Exception):
    """The world file is invalid; the message names the offending id."""


@dataclass
class Exit:
    to: str
    locked_by: str | None = None


@dataclass
class Room:
    id: str
    name: str
    description: str
    exits: dict = field(default_factory=dict)
    items: list = field(default_factory=list)


@dataclass
class World:
    start: str
    rooms: dict
    items: dict
    goal: dict


def load_world(source):
    if isinstance(source, dict):
        data = source
    else:
        try:
            with open(source, encoding="utf-8") as f:
                data = json.load(f)
        except json.JSONDecodeError as e:
            raise WorldError(f"{source}: not valid JSON ({e})") from None
    items = {name: spec.get("description", "") for name, spec in data.get("items", {}).items()}
    rooms = {}
    for room_id, spec in data.get("rooms", {}).items():
        exits = {}
        for direction, target in spec.get("exits", {}).items():
            exit_ = (
                Exit(target)
                if isinstance(target, str)
                else Exit(target["to"], target.get("locked_by"))
            )
            exits[direction] = exit_
        rooms[room_id] = Room(
            room_id,
            spec.get("name", room_id),
            spec.get("description", ""),
            exits,
            list(spec.get("items", [])),
        )
    start = data.get("start")
    if start not in rooms:
        raise WorldError(f"start room {start!r} is not defined")
    for room in rooms.values():
        for direction, exit_ in room.exits.items():
            if exit_.to not in rooms:
                raise WorldError(
                    f"exit {direction!r} of room {room.id!r} leads to unknown room {exit_.to!r}"
                )
            if exit_.locked_by is not None and exit_.locked_by not in items:
                raise WorldError(
                    f"lock on {room.id!r} {direction!r} needs unknown item {exit_.locked_by!r}"
                )
        for item in room.items:
            if item not in items:
                raise WorldError(f"room {room.id!r} holds unknown item {item!r}")
    goal = dict(data.get("goal", {}))
    if goal.get("room") is not None and goal["room"] not in rooms:
        raise WorldError(f"goal room {goal['room']!r} is not defined")
    for item in goal.get("carry", []):
        if item not in items:
            raise WorldError(f"goal item {item!r} is not defined")
    return World(start, rooms, items, goal)
