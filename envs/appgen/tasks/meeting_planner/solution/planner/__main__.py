import re

from . import calendar
from .db import Store
from .slots import free_slots, to_minutes, to_text
from .web import HttpError, Router, run

router = Router()
store = None
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def check(date, people, minutes):
    if not isinstance(date, str) or not DATE.match(date):
        raise HttpError(400, "date must be YYYY-MM-DD")
    if not isinstance(people, list) or not people or not all(isinstance(p, str) and p for p in people):
        raise HttpError(400, "name at least one person")
    if not isinstance(minutes, int) or isinstance(minutes, bool) or not 30 <= minutes <= 240 or minutes % 30:
        raise HttpError(400, "minutes must be 30 to 240 in steps of 30")


def busy_for(date, people):
    busy = []
    try:
        for person in people:
            busy += [(to_minutes(b["start"]), to_minutes(b["end"])) for b in calendar.busy(person, date)]
    except calendar.UnknownPerson:
        raise HttpError(404, "unknown person")
    except calendar.ServiceDown as e:
        raise HttpError(502, str(e))
    for m in store.all():
        if m["date"] == date and set(m["people"]) & set(people):
            busy.append((to_minutes(m["start"]), to_minutes(m["end"])))
    return busy


@router.route("GET", "/api/slots")
def slots(req):
    q = req.query
    people = [p.strip() for p in q.get("people", "").split(",") if p.strip()]
    try:
        minutes = int(q.get("minutes", ""))
    except ValueError:
        raise HttpError(400, "minutes must be a number")
    date = q.get("date", "")
    check(date, people, minutes)
    found = free_slots(busy_for(date, people), minutes)
    return 200, {"slots": [{"start": to_text(a), "end": to_text(b)} for a, b in found]}


@router.route("POST", "/api/meetings")
def book(req):
    data = req.json()
    date, start, minutes = data.get("date"), data.get("start"), data.get("minutes")
    title, people = data.get("title"), data.get("people")
    check(date, people, minutes)
    if not isinstance(title, str) or not title.strip():
        raise HttpError(400, "title is required")
    if not isinstance(start, str) or not re.match(r"^\d{2}:\d{2}$", start):
        raise HttpError(400, "start must be HH:MM")
    begin = to_minutes(start)
    if (begin, begin + minutes) not in free_slots(busy_for(date, people), minutes):
        raise HttpError(409, "that time is not free for everyone")
    end = to_text(begin + minutes)
    try:
        for person in people:
            calendar.add_event(person, date, start, end, title.strip())
    except calendar.UnknownPerson:
        raise HttpError(404, "unknown person")
    except calendar.ServiceDown as e:
        raise HttpError(502, str(e))
    return 201, store.add(date, start, end, title.strip(), people)


@router.route("GET", "/api/meetings")
def meetings(req):
    return 200, store.all()


if __name__ == "__main__":
    store = Store()
    run(router)
