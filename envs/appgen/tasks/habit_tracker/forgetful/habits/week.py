"""The week view (the user's second request)."""

import datetime

from . import dates


def register(router, store, habit_of, parse):
    @router.route("GET", "/api/habits/<hid>/week")
    def week(req):
        h = habit_of(req)
        day = parse(req.query["date"]) if "date" in req.query else datetime.date.today()
        sunday = day - datetime.timedelta(days=(day.weekday() + 1) % 7)
        done = set(store.days(h["id"]))
        days = [
            {"date": dates.show(d), "done": d.isoformat() in done}
            for d in (sunday + datetime.timedelta(days=i) for i in range(7))
        ]
        return 200, {"habit": h["name"], "days": days, "count": sum(d["done"] for d in days)}
