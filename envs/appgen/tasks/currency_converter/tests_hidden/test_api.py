def test_convert_uses_the_service(app, services):
    r = app.get("/api/convert?amount=100&from=EUR&to=USD")
    assert r.status == 200
    assert r.json() == {"amount": 100, "from": "EUR", "to": "USD", "rate": 1.1,
                        "result": 110.0, "stale": False}
    calls = services["rates"].calls("GET", "/latest")
    assert [c.query.get("base") for c in calls] == ["EUR"]
    assert app.get("/api/convert?amount=2&from=GBP&to=JPY").json()["result"] == 376.5


def test_rates_are_cached(app, services):
    for to in ("USD", "GBP", "JPY", "USD"):
        assert app.get(f"/api/convert?amount=1&from=EUR&to={to}").status == 200
    assert len(services["rates"].calls("GET", "/latest")) == 1
    assert app.get("/api/convert?amount=1&from=EUR&to=EUR").json()["rate"] == 1


def test_validation(app):
    for q in ("amount=0&from=EUR&to=USD", "amount=-1&from=EUR&to=USD", "amount=x&from=EUR&to=USD",
              "amount=1&from=eur&to=USD", "amount=1&from=EUR", "amount=1&from=EUR&to=XYZ",
              "amount=1&from=ABC&to=USD"):
        r = app.get("/api/convert?" + q)
        assert r.status == 400 and "error" in r.json(), q


def test_service_down_uses_cached_rates_or_502(app, services):
    services["rates"].fail(503)
    r = app.get("/api/convert?amount=10&from=USD&to=EUR")
    assert r.status == 502 and "error" in r.json()
    services["rates"].reset()
    assert app.get("/api/convert?amount=10&from=USD&to=EUR").json()["stale"] is False
    app.stop()
    app.extra_env["RATES_MAX_AGE"] = "0"  # every cached rate is now too old
    app.start()  # the cache is in SQLite, so it survives the restart
    services["rates"].fail(500)
    r = app.get("/api/convert?amount=10&from=USD&to=EUR").json()
    assert r["result"] == 9.0 and r["stale"] is True


def test_slow_service_is_cut_short(app, services):
    services["rates"].slow(8)
    r = app.get("/api/convert?amount=1&from=GBP&to=USD", timeout=7)
    assert r.status == 502


def test_history_is_kept(app):
    for amount in range(1, 13):
        app.get(f"/api/convert?amount={amount}&from=EUR&to=GBP")
    app.restart()
    history = app.get("/api/history").json()
    assert len(history) == 10
    assert history[0] == {"amount": 12, "from": "EUR", "to": "GBP", "result": 10.2}
    assert history[-1]["amount"] == 3
