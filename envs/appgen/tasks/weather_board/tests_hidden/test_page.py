def test_board_page(app, page):
    app.post("/api/cities", {"name": "Oslo"})
    page.goto(app.url + "/")
    page.wait_count("#board .card", 1)
    page.fill("#city", "Cairo")
    page.click("#add-city")
    page.wait_count("#board .card", 2)
    assert page.texts("#board .card .name") == ["Oslo", "Cairo"]
    assert page.texts("#board .card .temp") == ["4.5 °C", "31.2 °C"]
    page.select("#unit", "F")
    page.wait(lambda: page.texts("#board .card .temp") == ["40.1 °F", "88.2 °F"], "temperatures in F")
    assert app.get("/api/settings").json() == {"unit": "F"}
    page.reload()
    page.wait(lambda: page.value("#unit") == "F", "the saved unit")


def test_errors_and_remove(app, page):
    app.post("/api/cities", {"name": "Cairo"})
    page.goto(app.url + "/")
    page.wait_count("#board .card", 1)
    page.fill("#city", "Atlantis")
    page.click("#add-city")
    page.wait_for("#error")
    page.click("#board .card button.remove")
    page.wait_count("#board .card", 0)
    assert app.get("/api/board").json()["cities"] == []
