import pytest
import wardrobe


def names(outfit):
    """The item names of an outfit (here, not in the helper module: a value an assertion
    compares is computed in the test module itself)."""
    return {k: (v["name"] if v else None) for k, v in outfit.items()}


@pytest.mark.requirement("week")
def test_week_plan(app):
    week = app.get("/api/week?city=Lisbon").json()
    assert week["city"] == "Lisbon" and len(week["days"]) == 5
    assert [d["date"] for d in week["days"]] == [f"2026-03-0{i}" for i in range(2, 7)]
    assert [d["display"] for d in week["days"]][:2] == ["24.0 °C", "16.0 °C"]
    assert [d["rain"] for d in week["days"]][:2] == [False, True]
    assert len(app.get("/api/week?city=Oslo&days=7").json()["days"]) == 7
    assert app.get("/api/week?city=Oslo&days=8").status == 400
    assert app.get("/api/week?city=Atlantis").status == 404


@pytest.mark.requirement("cold")
def test_week_plans_with_the_felt_temperature(app):
    wardrobe.load(app)
    week = app.get("/api/week?city=Lisbon").json()
    assert [d["felt_c"] for d in week["days"]] == [21.0, 13.0, 16.0, 18.0, 20.0]
    assert [names(d["outfit"])["outer"] for d in week["days"]] == [
        None, "Rain jacket", None, None, None]


@pytest.mark.requirement("no_shorts")
def test_week_never_has_shorts(app):
    wardrobe.load(app)
    week = app.get("/api/week?city=Lisbon&days=7").json()
    assert [names(d["outfit"])["bottom"] for d in week["days"]] == ["Jeans"] * 7


@pytest.mark.requirement("home_city")
def test_home_city_is_kept(app):
    assert app.get("/api/settings").json() == {"city": None}
    assert app.get("/api/suggestion").status == 400
    assert app.put("/api/settings", {"city": "Lisbon"}).json() == {"city": "Lisbon"}
    app.restart()
    assert app.get("/api/settings").json() == {"city": "Lisbon"}
    assert app.get("/api/suggestion").json()["city"] == "Lisbon"
    assert app.get("/api/week?days=2").json()["city"] == "Lisbon"


@pytest.mark.requirement("week")
def test_page_week_view(app, page):
    wardrobe.load(app)
    app.put("/api/settings", {"city": "Oslo"})
    page.goto(app.url + "/")
    page.wait(lambda: page.value("#city") == "Oslo", "#city filled with the home city")
    page.click("#plan-week")
    page.wait_count("#week .day", 5)
    assert page.texts("#week .day .temp") == ["12.0 °C", "7.0 °C", "18.5 °C", "3.0 °C", "22.0 °C"]
    assert page.texts("#week .day .date")[0] == "2026-03-02"
    assert page.texts("#week .day .outfit")[2] == "Linen shirt, Jeans, Sneakers"
