import pytest


@pytest.mark.requirement("wardrobe")
def test_items_crud_and_restart(app):
    r = app.post("/api/items", {"name": "Jeans", "kind": "bottom", "warmth": 3, "rain_ok": False})
    assert r.status == 201
    jeans = r.json()
    assert jeans == {"id": jeans["id"], "name": "Jeans", "kind": "bottom", "warmth": 3, "rain_ok": False}
    boots = app.post("/api/items", {"name": "Boots", "kind": "shoes", "warmth": 4, "rain_ok": True}).json()
    for bad in ({"name": "", "kind": "top", "warmth": 1, "rain_ok": False},
                {"name": "Hat", "kind": "hat", "warmth": 1, "rain_ok": False},
                {"name": "Hat", "kind": "top", "warmth": 6, "rain_ok": False},
                {"name": "Hat", "kind": "top", "warmth": 0, "rain_ok": False},
                {"name": "Hat", "kind": "top"}):
        assert app.post("/api/items", bad).status == 400, bad
    app.restart()
    assert [i["name"] for i in app.get("/api/items").json()] == ["Jeans", "Boots"]
    assert app.delete(f"/api/items/{jeans['id']}").status == 204
    assert app.delete(f"/api/items/{jeans['id']}").status == 404
    assert [i["id"] for i in app.get("/api/items").json()] == [boots["id"]]


@pytest.mark.requirement("wardrobe")
def test_page_manages_the_wardrobe(app, page):
    page.goto(app.url + "/")
    page.fill("#item-name", "Wool sweater")
    page.select("#item-kind", "top")
    page.fill("#item-warmth", "4")
    page.click("#add-item")
    page.wait_text("#items li .item-name", "Wool sweater")
    page.fill("#item-name", "Rain jacket")
    page.select("#item-kind", "outer")
    page.fill("#item-warmth", "3")
    page.set_checked("#item-rain", True)
    page.click("#add-item")
    page.wait_count("#items li", 2)
    items = app.get("/api/items").json()
    assert [(i["name"], i["kind"], i["warmth"], i["rain_ok"]) for i in items] == [
        ("Wool sweater", "top", 4, False), ("Rain jacket", "outer", 3, True)]
    page.click("#items li:first-child button.remove")
    page.wait_count("#items li", 1)
    assert [i["name"] for i in app.get("/api/items").json()] == ["Rain jacket"]
