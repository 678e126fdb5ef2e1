import pytest
import wardrobe


def names(outfit):
    """The item names of an outfit (here, not in the helper module: a value an assertion
    compares is computed in the test module itself)."""
    return {k: (v["name"] if v else None) for k, v in outfit.items()}


@pytest.mark.requirement("cold")
def test_plans_with_the_felt_temperature(app):
    wardrobe.load(app)
    s = app.get("/api/suggestion?city=Oslo").json()
    assert (s["city"], s["date"], s["temp_c"], s["felt_c"], s["rain"]) == (
        "Oslo", "2026-03-02", 12.0, 9.0, False)
    assert names(s["outfit"]) == {
        "top": "Wool sweater", "bottom": "Thermal trousers", "outer": "Down coat",
        "shoes": "Rubber boots"}


@pytest.mark.requirement("no_shorts")
def test_never_suggests_shorts(app):
    wardrobe.load(app)
    app.post("/api/items", {"name": "Running shorts", "kind": "bottom", "warmth": 2, "rain_ok": True})
    s = app.get("/api/suggestion?city=Lisbon").json()
    assert names(s["outfit"]) == {
        "top": "T-shirt", "bottom": "Jeans", "outer": None, "shoes": "Sneakers"}


@pytest.mark.requirement("rain")
def test_rain_needs_rain_gear(app):
    for name, kind, warmth, rain_ok in [("Fleece", "top", 3, False), ("Chinos", "bottom", 3, False),
                                        ("Wool coat", "outer", 3, False), ("Poncho", "outer", 1, True),
                                        ("Loafers", "shoes", 3, False), ("Wellies", "shoes", 1, True)]:
        app.post("/api/items", {"name": name, "kind": kind, "warmth": warmth, "rain_ok": rain_ok})
    app.put("/api/settings", {"city": "Oslo"})
    s = app.get("/api/week?city=Oslo&days=2").json()["days"][1]
    assert s["rain"] is True
    assert names(s["outfit"]) == {
        "top": "Fleece", "bottom": "Chinos", "outer": "Poncho", "shoes": "Wellies"}


@pytest.mark.requirement("celsius")
def test_display_in_celsius(app):
    s = app.get("/api/suggestion?city=Oslo").json()
    assert s["display"] == "12.0 °C"
    assert names(s["outfit"]) == {"top": None, "bottom": None, "outer": None, "shoes": None}


def test_service_errors(app, services):
    assert app.get("/api/suggestion?city=Atlantis").status == 404
    services["weather"].fail(503)
    r = app.get("/api/suggestion?city=Oslo")
    assert r.status == 502 and "error" in r.json()
    calls = services["weather"].calls("GET", "/v1/forecast")
    assert calls and calls[0].query["city"] == "Atlantis"


@pytest.mark.requirement("celsius")
def test_page_shows_the_suggestion(app, page):
    wardrobe.load(app, shorts=False)
    page.goto(app.url + "/")
    page.fill("#city", "Lisbon")
    page.click("#suggest")
    page.wait_text("#temp", "24.0 °C")
    assert page.texts("#outfit li") == ["top: T-shirt", "bottom: Jeans", "shoes: Sneakers"]


def test_slow_service_is_cut_short(app, services):
    services["weather"].slow(8)
    r = app.get("/api/suggestion?city=Oslo", timeout=7)
    assert r.status == 502 and "error" in r.json()
