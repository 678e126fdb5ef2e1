def test_cities_with_weather(app, services):
    assert app.post("/api/cities", {"name": "oslo"}).json() == {"name": "Oslo"}
    assert app.post("/api/cities", {"name": "Cairo"}).status == 201
    assert app.post("/api/cities", {"name": "Oslo"}).status == 409
    assert app.post("/api/cities", {"name": "Atlantis"}).status == 400
    board = app.get("/api/board").json()
    assert board == {"unit": "C", "cities": [
        {"name": "Oslo", "temp": 4.5, "condition": "rain"},
        {"name": "Cairo", "temp": 31.2, "condition": "sunny"}]}
    queried = [c.query.get("city") for c in services["weather"].calls("GET", "/v1/current")]
    assert "Atlantis" in queried and "Cairo" in queried


def test_unit_preference(app):
    app.post("/api/cities", {"name": "Reykjavik"})
    app.post("/api/cities", {"name": "Cairo"})
    assert app.get("/api/settings").json() == {"unit": "C"}
    assert app.put("/api/settings", {"unit": "K"}).status == 400
    assert app.put("/api/settings", {"unit": "F"}).json() == {"unit": "F"}
    app.restart()
    board = app.get("/api/board").json()
    assert board["unit"] == "F"
    assert [c["temp"] for c in board["cities"]] == [26.6, 88.2]


def test_service_failures(app, services):
    app.post("/api/cities", {"name": "Cairo"})
    services["weather"].fail(503, times=1)
    assert app.post("/api/cities", {"name": "Oslo"}).status == 502
    services["weather"].fail(500)
    board = app.get("/api/board").json()
    assert board["cities"] == [{"name": "Cairo", "temp": None, "condition": "unavailable"}]


def test_delete_and_restart(app):
    app.post("/api/cities", {"name": "Cairo"})
    app.post("/api/cities", {"name": "Oslo"})
    assert app.delete("/api/cities/Cairo").status == 204
    assert app.delete("/api/cities/Cairo").status == 404
    app.restart()
    assert [c["name"] for c in app.get("/api/board").json()["cities"]] == ["Oslo"]


def test_slow_service_is_cut_short(app, services):
    services["weather"].slow(8)
    assert app.post("/api/cities", {"name": "Oslo"}, timeout=7).status == 502
    services["weather"].reset()
    assert app.get("/api/board").json()["cities"] == []
