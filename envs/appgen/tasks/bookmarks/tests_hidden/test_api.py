def add(app, url, title, tags):
    r = app.post("/api/bookmarks", {"url": url, "title": title, "tags": tags})
    assert r.status == 201, r
    return r.json()


def test_add_list_and_filter(app):
    a = add(app, "https://python.org", " Python ", ["Lang", " code ", "lang", ""])
    assert a["title"] == "Python" and a["tags"] == ["code", "lang"]
    add(app, "https://sqlite.org", "SQLite docs", ["db", "code"])
    add(app, "http://example.com/recipes", "Soup", ["food"])
    titles = lambda q: [b["title"] for b in app.get("/api/bookmarks" + q).json()]
    assert titles("") == ["Soup", "SQLite docs", "Python"]
    assert titles("?tag=code") == ["SQLite docs", "Python"]
    assert titles("?q=SQL") == ["SQLite docs"]
    assert titles("?q=example") == ["Soup"]
    assert titles("?q=o&tag=code") == ["SQLite docs", "Python"]
    assert app.get("/api/tags").json() == [
        {"tag": "code", "count": 2}, {"tag": "db", "count": 1}, {"tag": "food", "count": 1},
        {"tag": "lang", "count": 1}]


def test_errors_and_delete(app):
    assert app.post("/api/bookmarks", {"url": "ftp://x", "title": "X", "tags": []}).status == 400
    assert app.post("/api/bookmarks", {"url": "https://x.org", "title": " ", "tags": []}).status == 400
    assert app.post("/api/bookmarks", {"url": "https://x.org", "title": "T" * 101, "tags": []}).status == 400
    b = add(app, "https://x.org", "X", [])
    r = app.post("/api/bookmarks", {"url": "https://x.org", "title": "Again", "tags": []})
    assert r.status == 409 and "error" in r.json()
    assert app.delete(f"/api/bookmarks/{b['id']}").status == 204
    assert app.delete(f"/api/bookmarks/{b['id']}").status == 404


def test_survives_restart(app):
    add(app, "https://python.org", "Python", ["lang"])
    app.restart()
    assert [b["url"] for b in app.get("/api/bookmarks?tag=lang").json()] == ["https://python.org"]
