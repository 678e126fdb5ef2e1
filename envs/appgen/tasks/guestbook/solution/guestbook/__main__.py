from .db import Store
from .web import HttpError, Router, run

router = Router()
store = None


def clean(data, field, limit):
    value = data.get(field)
    if not isinstance(value, str) or not value.strip():
        raise HttpError(400, f"{field} is required")
    value = value.strip()
    if len(value) > limit:
        raise HttpError(400, f"{field} is longer than {limit} characters")
    return value


@router.route("GET", "/api/entries")
def list_entries(req):
    return 200, store.list()


@router.route("POST", "/api/entries")
def add_entry(req):
    data = req.json()
    return 201, store.add(clean(data, "name", 40), clean(data, "message", 200))


@router.route("DELETE", "/api/entries/<entry_id>")
def delete_entry(req):
    try:
        entry_id = int(req.params["entry_id"])
    except ValueError:
        raise HttpError(404, "no such entry")
    if not store.delete(entry_id):
        raise HttpError(404, "no such entry")
    return 204, None


@router.route("GET", "/api/<rest>")
def unknown(req):
    raise HttpError(404, "not found")


if __name__ == "__main__":
    store = Store()
    run(router)
