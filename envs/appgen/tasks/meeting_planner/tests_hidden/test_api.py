def slots(app, query):
    r = app.get("/api/slots?" + query)
    assert r.status == 200, r
    return [f"{s['start']}-{s['end']}" for s in r.json()["slots"]]


def test_free_slots_for_everyone(app, services):
    assert slots(app, "date=2026-05-04&people=ann,bo&minutes=60") == [
        "11:00-12:00", "11:30-12:30", "12:00-13:00", "14:00-15:00", "14:30-15:30"]
    asked = sorted(c.path for c in services["calendar"].calls("GET"))
    assert asked == ["/calendars/ann/busy", "/calendars/bo/busy"]
    assert all(c.query["date"] == "2026-05-04" for c in services["calendar"].calls("GET"))
    assert slots(app, "date=2026-05-04&people=ann,bo,cy&minutes=90") == ["14:00-15:30"]
    assert len(slots(app, "date=2026-05-05&people=ann&minutes=30")) == 16


def test_slot_validation(app, services):
    for q in ("date=2026-05-04&people=&minutes=60", "date=2026-05-04&people=ann&minutes=45",
              "date=2026-05-04&people=ann&minutes=270", "date=nope&people=ann&minutes=60"):
        assert app.get("/api/slots?" + q).status == 400, q
    assert app.get("/api/slots?date=2026-05-04&people=ann,zed&minutes=60").status == 404
    services["calendar"].fail(503)
    assert app.get("/api/slots?date=2026-05-04&people=ann&minutes=60").status == 502


def test_booking_writes_to_every_calendar(app, services):
    r = app.post("/api/meetings", {"date": "2026-05-04", "start": "11:00", "minutes": 60,
                                   "title": "Planning", "people": ["ann", "bo"]})
    assert r.status == 201
    m = r.json()
    assert (m["date"], m["start"], m["end"], m["title"], m["people"]) == (
        "2026-05-04", "11:00", "12:00", "Planning", ["ann", "bo"])
    events = services["calendar"].calls("POST")
    assert sorted(e.path for e in events) == ["/calendars/ann/events", "/calendars/bo/events"]
    assert events[0].json() == {"date": "2026-05-04", "start": "11:00", "end": "12:00", "title": "Planning"}
    assert slots(app, "date=2026-05-04&people=bo&minutes=60")[:3] == [
        "09:00-10:00", "12:00-13:00", "12:30-13:30"]
    clash = {"date": "2026-05-04", "start": "11:30", "minutes": 30, "title": "X", "people": ["cy", "ann"]}
    assert app.post("/api/meetings", clash).status == 409
    busy = {"date": "2026-05-04", "start": "09:00", "minutes": 30, "title": "X", "people": ["ann"]}
    assert app.post("/api/meetings", busy).status == 409
    assert app.post("/api/meetings", {**busy, "start": "16:00", "title": ""}).status == 400


def test_meetings_are_kept(app):
    app.post("/api/meetings", {"date": "2026-05-05", "start": "09:00", "minutes": 30,
                               "title": "Later", "people": ["cy"]})
    app.post("/api/meetings", {"date": "2026-05-04", "start": "14:00", "minutes": 30,
                               "title": "Sooner", "people": ["ann"]})
    app.restart()
    assert [m["title"] for m in app.get("/api/meetings").json()] == ["Sooner", "Later"]
    assert "14:00-14:30" not in slots(app, "date=2026-05-04&people=ann&minutes=30")


def test_slow_calendar_is_cut_short(app, services):
    services["calendar"].slow(8)
    r = app.get("/api/slots?date=2026-05-04&people=ann&minutes=60", timeout=7)
    assert r.status == 502 and "error" in r.json()
