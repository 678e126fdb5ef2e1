"""Board rules: columns, ordering, WIP limits (pure functions on lists of cards)."""

COLUMNS = ("todo", "doing", "done")


class Refused(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def move(cards, card_id, column, position, limits):
    """cards: dicts with id, title, column, position. Returns the new list."""
    if column not in COLUMNS:
        raise Refused(400, f"unknown column {column}")
    card = next((c for c in cards if c["id"] == card_id), None)
    if card is None:
        raise Refused(404, "no such card")
    target = [c for c in sorted(cards, key=lambda c: c["position"]) if c["column"] == column and c["id"] != card_id]
    if card["column"] != column and limits.get(column) is not None and len(target) >= limits[column]:
        raise Refused(409, f"{column} is full (limit {limits[column]})")
    if position is None or position > len(target):
        position = len(target)
    if not isinstance(position, int) or isinstance(position, bool) or position < 0:
        raise Refused(400, "position must be an index >= 0")
    source = card["column"]
    target.insert(position, {**card, "column": column})
    out = [c for c in cards if c["column"] not in (column, source)]
    out += renumber(target)
    if source != column:
        out += renumber([c for c in sorted(cards, key=lambda c: c["position"]) if c["column"] == source and c["id"] != card_id])
    return out


def renumber(cards):
    return [{**c, "position": i} for i, c in enumerate(cards)]
