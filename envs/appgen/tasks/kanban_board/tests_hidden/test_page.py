def titles(page, column):
    return page.texts(f'#board .column[data-name="{column}"] .card .title')


def test_add_and_move_cards(app, page):
    page.goto(app.url + "/")
    page.wait_count("#board .column", 3)
    for title in ("Write spec", "Build it"):
        page.fill("#new-card", title)
        page.click("#add-card")
        page.wait_text('#board .column[data-name="todo"] .card .title', title)
    assert page.count('#board .column[data-name="todo"] .card .left') == 0
    page.click('#board .column[data-name="todo"] .card:first-child .right')
    page.wait(lambda: titles(page, "doing") == ["Write spec"], "the card in doing")
    assert titles(page, "todo") == ["Build it"]
    page.click('#board .column[data-name="doing"] .card .right')
    page.wait(lambda: titles(page, "done") == ["Write spec"], "the card in done")
    assert page.count('#board .column[data-name="done"] .card .right') == 0
    assert app.get("/api/board").json()["columns"][2]["cards"][0]["title"] == "Write spec"


def test_wip_limit_on_the_page(app, page):
    for t in ("a", "b"):
        app.post("/api/cards", {"title": t})
    app.put("/api/columns/doing", {"limit": 1})
    page.goto(app.url + "/")
    page.wait_count('#board .column[data-name="todo"] .card', 2)
    assert page.text('#board .column[data-name="doing"] .count') == "0/1"
    page.click('#board .column[data-name="todo"] .card:first-child .right')
    page.wait(lambda: page.text('#board .column[data-name="doing"] .count') == "1/1", "doing to fill up")
    page.click('#board .column[data-name="todo"] .card:first-child .right')
    page.wait_for("#error")
    assert titles(page, "todo") == ["b"]
