"""Turning a typed line into (verb, object)."""

DIRECTIONS = {
    "n": "north",
    "s": "south",
    "e": "east",
    "w": "west",
    "u": "up",
    "d": "down",
}
FULL = set(DIRECTIONS.values())
SYNONYMS = {"get": "take", "l": "look", "i": "inventory", "inv": "inventory", "x": "examine"}
NO_OBJECT = {"look", "inventory", "quit"}
WITH_OBJECT = {"go", "take", "drop", "examine", "unlock"}
ARTICLES = {"the", "a", "an"}


def parse(line):
    words = [w for w in line.lower().split() if w not in ARTICLES]
    if not words:
        return "unknown", None
    if len(words) == 1 and (words[0] in DIRECTIONS or words[0] in FULL):
        return "go", DIRECTIONS.get(words[0], words[0])
    verb, rest = words[0], words[1:]
    if verb == "pick" and rest[:1] == ["up"]:
        verb, rest = "take", rest[1:]
    verb = SYNONYMS.get(verb, verb)
    if verb in NO_OBJECT and not rest:
        return verb, None
    if verb in WITH_OBJECT and rest:
        obj = " ".join(rest)
        if verb == "go":
            obj = DIRECTIONS.get(obj, obj)
        return verb, obj
    return "unknown", None
