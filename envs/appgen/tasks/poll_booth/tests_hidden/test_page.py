def test_create_poll_with_extra_options(app, page):
    page.goto(app.url + "/")
    assert page.count("#options input.option") == 2
    page.fill("#question", "Best season?")
    page.click("#add-option")
    page.wait_count("#options input.option", 3)
    inputs = ["#options input.option:nth-of-type(%d)" % i for i in (1, 2, 3)]
    page.eval("document.querySelectorAll('#options input.option').forEach((e, i) => e.id = 'opt' + i)")
    for i, text in enumerate(["Spring", "Summer", "Autumn"]):
        page.fill(f"#opt{i}", text)
    page.click("#create")
    page.wait_text("#polls .poll .question", "Best season?")
    assert page.texts("#polls .poll:first-child .result") == [
        "Spring: 0 (0%)", "Summer: 0 (0%)", "Autumn: 0 (0%)"]
    assert page.count("#options input.option") == 2
    assert [p["question"] for p in app.get("/api/polls").json()] == ["Best season?"]


def test_voting_updates_results_in_place(app, page):
    pid = app.post("/api/polls", {"question": "Tea or coffee?", "options": ["Tea", "Coffee"]}).json()["id"]
    app.post(f"/api/polls/{pid}/vote", {"option": 1})
    page.goto(app.url + "/")
    page.wait_text(".poll .result", "Coffee: 1 (100%)")
    page.eval("window.__marker = 1")
    page.click(".poll .choice button.vote")
    page.wait_text(".poll .result", "Tea: 1 (50%)")
    assert page.texts(".poll .result") == ["Tea: 1 (50%)", "Coffee: 1 (50%)"]
    assert page.eval("window.__marker") == 1


def test_invalid_poll_is_not_sent(app, page):
    page.goto(app.url + "/")
    page.fill("#question", "Only one option?")
    page.eval("document.querySelectorAll('#options input.option')[0].id = 'o1'")
    page.fill("#o1", "Lonely")
    page.click("#create")
    page.wait_for("#error")
    assert app.get("/api/polls").json() == []
