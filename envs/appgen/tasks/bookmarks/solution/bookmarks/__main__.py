from .db import Duplicate, Store
from .web import HttpError, Router, run

router = Router()
store = None


@router.route("POST", "/api/bookmarks")
def add(req):
    data = req.json()
    url, title, tags = data.get("url"), data.get("title"), data.get("tags", [])
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise HttpError(400, "url must start with http:// or https://")
    if not isinstance(title, str) or not 1 <= len(title.strip()) <= 100:
        raise HttpError(400, "title must have 1 to 100 characters")
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise HttpError(400, "tags must be a list of strings")
    clean = sorted({t.strip().lower() for t in tags if t.strip()})
    try:
        return 201, store.add(url, title.strip(), clean)
    except Duplicate:
        raise HttpError(409, "that URL is already saved")


@router.route("GET", "/api/bookmarks")
def listing(req):
    tag, q = req.query.get("tag"), (req.query.get("q") or "").lower()
    out = store.all()
    if tag:
        out = [b for b in out if tag in b["tags"]]
    if q:
        out = [b for b in out if q in b["title"].lower() or q in b["url"].lower()]
    return 200, out


@router.route("DELETE", "/api/bookmarks/<bid>")
def delete(req):
    try:
        bid = int(req.params["bid"])
    except ValueError:
        raise HttpError(404, "no such bookmark")
    if not store.delete(bid):
        raise HttpError(404, "no such bookmark")
    return 204, None


@router.route("GET", "/api/tags")
def tags(req):
    counts = {}
    for b in store.all():
        for t in b["tags"]:
            counts[t] = counts.get(t, 0) + 1
    return 200, [{"tag": t, "count": counts[t]} for t in sorted(counts)]


if __name__ == "__main__":
    store = Store()
    run(router)
