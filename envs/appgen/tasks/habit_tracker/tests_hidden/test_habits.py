import pytest


def habit(app, name):
    r = app.post("/api/habits", {"name": name})
    assert r.status == 201, r
    return r.json()["id"]


@pytest.mark.requirement("habits")
def test_habits_checkins_and_streaks(app):
    run = habit(app, "Run")
    read = habit(app, "Read")
    assert app.post("/api/habits", {"name": "RUN"}).status == 409
    assert app.post("/api/habits", {"name": ""}).status == 400
    for d in ("01/03/2026", "02/03/2026", "03/03/2026", "03/03/2026"):
        assert app.post(f"/api/habits/{run}/checkins", {"date": d}).status == 201
    app.post(f"/api/habits/{read}/checkins", {"date": "28/02/2026"})
    listed = app.get("/api/habits?today=04/03/2026").json()
    assert [(h["name"], h["streak"], h["last"]) for h in listed] == [
        ("Run", 3, "03/03/2026"), ("Read", 0, "28/02/2026")]
    assert app.get("/api/habits?today=03/03/2026").json()[0]["streak"] == 3
    assert app.get("/api/habits?today=05/03/2026").json()[0]["streak"] == 0
    assert app.post("/api/habits/999/checkins", {"date": "01/03/2026"}).status == 404
    app.restart()
    assert app.get(f"/api/habits/{run}/checkins").json() == ["03/03/2026", "02/03/2026", "01/03/2026"]


@pytest.mark.requirement("date_format")
def test_dates_are_dd_mm_yyyy(app):
    hid = habit(app, "Stretch")
    assert app.post(f"/api/habits/{hid}/checkins", {"date": "2026-03-04"}).status == 400
    assert app.post(f"/api/habits/{hid}/checkins", {"date": "31/02/2026"}).status == 400
    assert app.post(f"/api/habits/{hid}/checkins", {"date": "04/03/2026"}).status == 201
    assert app.get(f"/api/habits/{hid}/checkins").json() == ["04/03/2026"]
    week = app.get(f"/api/habits/{hid}/week?date=04/03/2026").json()
    assert all(len(d["date"]) == 10 and d["date"][2] == "/" and d["date"][5] == "/" for d in week["days"])
    assert app.get(f"/api/habits/{hid}/week?date=2026-03-04").status == 400


@pytest.mark.requirement("habits")
def test_page_adds_and_checks_in(app, page):
    page.goto(app.url + "/")
    page.fill("#habit-name", "Meditate")
    page.click("#add-habit")
    page.wait_text("#habits li.habit .name", "Meditate")
    assert page.text("#habits li.habit .streak") == "0"
    page.click("#habits li.habit .check-in")
    page.wait(lambda: page.text("#habits li.habit .streak") == "1", "the streak to become 1")
    hid = app.get("/api/habits").json()[0]["id"]
    assert len(app.get(f"/api/habits/{hid}/checkins").json()) == 1
