from . import board
from .db import Store, lock
from .web import HttpError, Router, run

router = Router()
store = None


def card_id(req):
    try:
        return int(req.params["cid"])
    except ValueError:
        raise HttpError(404, "no such card")


@router.route("GET", "/api/board")
def get_board(req):
    with lock:
        return 200, store.board()


@router.route("POST", "/api/cards")
def add(req):
    title = req.json().get("title")
    if not isinstance(title, str) or not 1 <= len(title.strip()) <= 80:
        raise HttpError(400, "title must have 1 to 80 characters")
    with lock:
        limit = store.limits()["todo"]
        if limit is not None and sum(c["column"] == "todo" for c in store.cards()) >= limit:
            raise HttpError(409, f"todo is full (limit {limit})")
        return 201, store.add(title.strip())


@router.route("POST", "/api/cards/<cid>/move")
def move(req):
    data = req.json()
    with lock:
        try:
            cards = board.move(store.cards(), card_id(req), data.get("column"), data.get("position"), store.limits())
        except board.Refused as e:
            raise HttpError(e.status, str(e))
        store.save(cards)
        return 200, store.board()


@router.route("DELETE", "/api/cards/<cid>")
def delete(req):
    with lock:
        cards = store.cards()
        gone = next((c for c in cards if c["id"] == card_id(req)), None)
        if gone is None or not store.delete(gone["id"]):
            raise HttpError(404, "no such card")
        rest = [c for c in cards if c["column"] == gone["column"] and c["id"] != gone["id"]]
        store.save(board.renumber(rest))
    return 204, None


@router.route("PUT", "/api/columns/<name>")
def set_limit(req):
    name = req.params["name"]
    if name not in board.COLUMNS:
        raise HttpError(404, "no such column")
    limit = req.json().get("limit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise HttpError(400, "limit must be an integer >= 1 or null")
    with lock:
        store.set_limit(name, limit)
        return 200, store.board()


if __name__ == "__main__":
    store = Store()
    run(router)
