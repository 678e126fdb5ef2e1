def board(app):
    return {c["name"]: [card["title"] for card in c["cards"]] for c in app.get("/api/board").json()["columns"]}


def add(app, title):
    r = app.post("/api/cards", {"title": title})
    assert r.status == 201, r
    return r.json()["id"]


def test_cards_and_order(app):
    ids = {t: add(app, t) for t in ("a", "b", "c", "d")}
    assert board(app) == {"todo": ["a", "b", "c", "d"], "doing": [], "done": []}
    assert app.post(f"/api/cards/{ids['d']}/move", {"column": "todo", "position": 0}).status == 200
    assert board(app)["todo"] == ["d", "a", "b", "c"]
    app.post(f"/api/cards/{ids['a']}/move", {"column": "doing"})
    app.post(f"/api/cards/{ids['b']}/move", {"column": "doing", "position": 0})
    app.post(f"/api/cards/{ids['c']}/move", {"column": "doing", "position": 1})
    assert board(app) == {"todo": ["d"], "doing": ["b", "c", "a"], "done": []}
    columns = app.get("/api/board").json()["columns"]
    assert [c["position"] for c in columns[1]["cards"]] == [0, 1, 2]
    assert all(c["column"] == "doing" for c in columns[1]["cards"])


def test_errors(app):
    cid = add(app, "x")
    assert app.post("/api/cards", {"title": "  "}).status == 400
    assert app.post("/api/cards", {"title": "t" * 81}).status == 400
    assert app.post(f"/api/cards/{cid}/move", {"column": "later"}).status == 400
    assert app.post(f"/api/cards/{cid}/move", {"column": "done", "position": -1}).status == 400
    assert app.post("/api/cards/999/move", {"column": "done"}).status == 404
    assert app.delete("/api/cards/999").status == 404
    assert app.put("/api/columns/doing", {"limit": 0}).status == 400
    assert app.put("/api/columns/later", {"limit": 2}).status == 404


def test_wip_limits(app):
    ids = [add(app, t) for t in ("a", "b", "c")]
    assert app.put("/api/columns/doing", {"limit": 2}).status == 200
    app.post(f"/api/cards/{ids[0]}/move", {"column": "doing"})
    app.post(f"/api/cards/{ids[1]}/move", {"column": "doing"})
    r = app.post(f"/api/cards/{ids[2]}/move", {"column": "doing"})
    assert r.status == 409 and "error" in r.json()
    assert board(app)["doing"] == ["a", "b"]
    assert app.post(f"/api/cards/{ids[1]}/move", {"column": "doing", "position": 0}).status == 200
    assert board(app)["doing"] == ["b", "a"]
    app.put("/api/columns/todo", {"limit": 1})
    assert app.post("/api/cards", {"title": "d"}).status == 409
    app.put("/api/columns/doing", {"limit": None})
    assert app.post(f"/api/cards/{ids[2]}/move", {"column": "doing"}).status == 200


def test_delete_and_restart(app):
    ids = [add(app, t) for t in ("a", "b", "c")]
    app.put("/api/columns/done", {"limit": 5})
    assert app.delete(f"/api/cards/{ids[1]}").status == 204
    app.restart()
    columns = app.get("/api/board").json()["columns"]
    assert [(c["title"], c["position"]) for c in columns[0]["cards"]] == [("a", 0), ("c", 1)]
    assert columns[2]["limit"] == 5
