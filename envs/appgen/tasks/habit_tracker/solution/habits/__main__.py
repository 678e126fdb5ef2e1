import datetime

from . import dates
from .db import Duplicate, Store
from .web import HttpError, Router, run

try:
    from . import week
except ImportError:  # the week view came with the second request
    week = None

router = Router()
store = None


def habit_of(req):
    try:
        found = store.get(int(req.params["hid"]))
    except ValueError:
        found = None
    if found is None:
        raise HttpError(404, "no such habit")
    return found


def parse(text):
    try:
        return dates.parse(text)
    except dates.BadDate as e:
        raise HttpError(400, str(e))


def streak(days, today):
    done = {datetime.date.fromisoformat(d) for d in days}
    day = today if today in done else today - datetime.timedelta(days=1)
    count = 0
    while day in done:
        count += 1
        day -= datetime.timedelta(days=1)
    return count


@router.route("POST", "/api/habits")
def add(req):
    name = req.json().get("name")
    if not isinstance(name, str) or not 1 <= len(name.strip()) <= 50:
        raise HttpError(400, "name must have 1 to 50 characters")
    try:
        return 201, store.add(name.strip())
    except Duplicate:
        raise HttpError(409, "that habit exists")


@router.route("GET", "/api/habits")
def listing(req):
    today = parse(req.query["today"]) if "today" in req.query else datetime.date.today()
    out = []
    for h in store.habits():
        days = store.days(h["id"])
        last = dates.show(datetime.date.fromisoformat(days[0])) if days else None
        out.append({**h, "streak": streak(days, today), "last": last})
    return 200, out


@router.route("POST", "/api/habits/<hid>/checkins")
def check_in(req):
    h = habit_of(req)
    day = parse(req.json().get("date"))
    store.check_in(h["id"], day.isoformat())
    return 201, {"habit": h["id"], "date": dates.show(day)}


@router.route("GET", "/api/habits/<hid>/checkins")
def checkins(req):
    h = habit_of(req)
    return 200, [dates.show(datetime.date.fromisoformat(d)) for d in store.days(h["id"])]


if __name__ == "__main__":
    store = Store()
    if week is not None:
        week.register(router, store, habit_of, parse)
    run(router)
