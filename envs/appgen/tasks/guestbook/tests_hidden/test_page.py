def test_page_lists_existing_entries(app, page):
    app.post("/api/entries", {"name": "Ann", "message": "one"})
    app.post("/api/entries", {"name": "Bo", "message": "two"})
    page.goto(app.url + "/")
    page.wait_count("#entries li", 2)
    assert page.texts("#entries li .name") == ["Bo", "Ann"]
    assert page.texts("#entries li .message") == ["two", "one"]


def test_signing_updates_the_list_without_reload(app, page):
    page.goto(app.url + "/")
    page.eval("window.__marker = 42")
    page.fill("#name", "Cy")
    page.fill("#message", "Lovely page")
    page.click("#sign")
    page.wait_text("#entries li .message", "Lovely page")
    assert page.eval("window.__marker") == 42
    assert page.value("#name") == "" and page.value("#message") == ""
    page.fill("#name", "Di")
    page.fill("#message", "By keyboard")
    page.press("Enter")
    page.wait_count("#entries li", 2)
    assert page.texts("#entries li .name") == ["Di", "Cy"]
    assert [e["name"] for e in app.get("/api/entries").json()] == ["Di", "Cy"]


def test_client_side_validation_sends_nothing(app, page):
    page.goto(app.url + "/")
    page.fill("#name", "")
    page.fill("#message", "no name")
    page.click("#sign")
    page.wait_for("#error")
    assert page.text("#error")
    page.fill("#name", "Ed")
    page.fill("#message", "x" * 201)
    page.click("#sign")
    page.wait_for("#error")
    assert app.get("/api/entries").json() == []
