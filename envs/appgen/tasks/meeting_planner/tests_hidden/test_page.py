def test_find_and_book(app, page, services):
    page.goto(app.url + "/")
    page.fill("#date", "2026-05-04")
    page.fill("#people", "ann, bo")
    page.select("#minutes", "60")
    page.click("#find")
    page.wait_count("#slots li", 5)
    assert page.texts("#slots li .time")[0] == "11:00-12:00"
    page.fill("#title", "Kick-off")
    page.click("#slots li:first-child button.book")
    page.wait_text("#meetings li", "2026-05-04 11:00-12:00 Kick-off (ann, bo)")
    page.wait(lambda: page.texts("#slots li .time")[:1] == ["12:00-13:00"], "the slots listed again")
    assert len(services["calendar"].calls("POST")) == 2


def test_page_shows_errors(app, page):
    page.goto(app.url + "/")
    page.fill("#date", "2026-05-04")
    page.fill("#people", "zed")
    page.click("#find")
    page.wait_for("#error")
