from .db import KINDS, Store
from .suggest import suggest
from .web import HttpError, Router, run

try:
    from . import week
except ImportError:  # the week plan came with the second request
    week = None

router = Router()
store = None


def city_of(req):
    city = (req.query.get("city") or "").strip() or (store.get_setting("city") if store else None)
    if not city:
        raise HttpError(400, "no city given and no home city saved")
    return city


@router.route("GET", "/api/items")
def items(req):
    return 200, store.items()


@router.route("POST", "/api/items")
def add_item(req):
    data = req.json()
    name, kind, warmth, rain_ok = (data.get(k) for k in ("name", "kind", "warmth", "rain_ok"))
    if not isinstance(name, str) or not name.strip():
        raise HttpError(400, "name is required")
    if kind not in KINDS:
        raise HttpError(400, f"kind must be one of {', '.join(KINDS)}")
    if not isinstance(warmth, int) or isinstance(warmth, bool) or not 1 <= warmth <= 5:
        raise HttpError(400, "warmth must be an integer from 1 to 5")
    if not isinstance(rain_ok, bool):
        raise HttpError(400, "rain_ok must be true or false")
    return 201, store.add(name.strip(), kind, warmth, rain_ok)


@router.route("DELETE", "/api/items/<item_id>")
def delete_item(req):
    try:
        item_id = int(req.params["item_id"])
    except ValueError:
        raise HttpError(404, "no such item")
    if not store.delete(item_id):
        raise HttpError(404, "no such item")
    return 204, None


@router.route("GET", "/api/suggestion")
def suggestion(req):
    from .week import fetch

    city = city_of(req)
    day = fetch(city, 1)[0]
    return 200, suggest(city, day, store.items())


if __name__ == "__main__":
    store = Store()
    if week is not None:
        week.register(router, store, city_of)
    run(router)
