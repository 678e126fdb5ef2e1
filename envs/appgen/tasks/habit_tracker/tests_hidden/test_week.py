import datetime

import pytest


def parse(text):
    for fmt in ("%d/%m/%Y", "%Y-%m-%d"):
        try:
            return datetime.datetime.strptime(text, fmt).date()
        except ValueError:
            pass
    raise AssertionError(f"not a date: {text!r}")


def swim_habit(app):
    hid = app.post("/api/habits", {"name": "Swim"}).json()["id"]
    for d in ("03/03/2026", "04/03/2026", "08/03/2026"):
        app.post(f"/api/habits/{hid}/checkins", {"date": d})
    return hid


@pytest.mark.requirement("week_view")
def test_week_view(app):
    hid = swim_habit(app)
    week = app.get(f"/api/habits/{hid}/week?date=04/03/2026").json()
    assert week["habit"] == "Swim" and len(week["days"]) == 7
    days = [parse(d["date"]) for d in week["days"]]
    assert days == [days[0] + datetime.timedelta(i) for i in range(7)]
    assert datetime.date(2026, 3, 4) in days
    done = {parse(d["date"]) for d in week["days"] if d["done"]}
    assert done == {datetime.date(2026, 3, 3), datetime.date(2026, 3, 4), datetime.date(2026, 3, 8)} & set(days)
    assert week["count"] == len(done)
    assert app.get("/api/habits/999/week?date=04/03/2026").status == 404


@pytest.mark.requirement("monday")
def test_weeks_start_on_monday(app):
    hid = swim_habit(app)
    for date in ("04/03/2026", "02/03/2026", "08/03/2026"):
        week = app.get(f"/api/habits/{hid}/week?date={date}").json()
        first = parse(week["days"][0]["date"])
        assert first.weekday() == 0 and first == datetime.date(2026, 3, 2), date
    assert app.get(f"/api/habits/{hid}/week?date=08/03/2026").json()["count"] == 3


@pytest.mark.requirement("week_view")
def test_page_week(app, page):
    hid = app.post("/api/habits", {"name": "Walk"}).json()["id"]
    today = datetime.date.today()
    app.post(f"/api/habits/{hid}/checkins", {"date": today.strftime("%d/%m/%Y")})
    page.goto(app.url + "/")
    page.wait_text("#habits li.habit .name", "Walk")
    page.click("#habits li.habit .show-week")
    page.wait_count("#week .day", 7)
    assert page.text("#week-count") == "1/7"
    assert page.count("#week .day.done") == 1
