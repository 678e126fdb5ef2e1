def test_home_page_is_html(app):
    r = app.get("/")
    assert r.status == 200
    assert r.headers["content-type"].startswith("text/html")
    assert 'id="sign-form"' in r.text


def test_sign_and_list_newest_first(app):
    first = app.post("/api/entries", {"name": "  Ann ", "message": " Hello there "})
    assert first.status == 201
    e = first.json()
    assert e["name"] == "Ann" and e["message"] == "Hello there" and isinstance(e["id"], int)
    app.post("/api/entries", {"name": "Bo", "message": "Second"})
    listed = app.get("/api/entries").json()
    assert [x["name"] for x in listed] == ["Bo", "Ann"]
    assert set(listed[0]) >= {"id", "name", "message", "created"}


def test_validation_errors(app):
    for body in ({"name": "", "message": "x"}, {"name": "A", "message": "   "},
                 {"message": "x"}, {"name": "A" * 41, "message": "x"},
                 {"name": "A", "message": "m" * 201}):
        r = app.post("/api/entries", body)
        assert r.status == 400 and "error" in r.json(), body
    r = app.request("POST", "/api/entries", data=b"{oops", headers={"Content-Type": "application/json"})
    assert r.status == 400
    assert app.post("/api/entries", {"name": "A" * 40, "message": "m" * 200}).status == 201
    assert app.get("/api/nothing").status == 404


def test_delete(app):
    e = app.post("/api/entries", {"name": "Ann", "message": "bye"}).json()
    assert app.delete(f"/api/entries/{e['id']}").status == 204
    assert app.delete(f"/api/entries/{e['id']}").status == 404
    assert app.get("/api/entries").json() == []


def test_entries_survive_a_restart(app):
    app.post("/api/entries", {"name": "Ann", "message": "still here"})
    app.restart()
    assert [e["message"] for e in app.get("/api/entries").json()] == ["still here"]
