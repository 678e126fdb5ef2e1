import group
import pytest


def plan(app):
    return [(s["from"], s["to"], s["amount"]) for s in app.get("/api/settlements").json()]


@pytest.mark.requirement("settle")
def test_settlements_clear_every_balance(app):
    group.members(app, "Ann", "Bo", "Cy", "Di")
    group.spend(app, "Ann", 100)
    group.spend(app, "Bo", 20, ["Bo", "Cy"])
    assert plan(app) == [("Cy", "Ann", 3500), ("Di", "Ann", 2500), ("Bo", "Ann", 1500)]


@pytest.mark.requirement("euro_format")
def test_settlement_amounts_in_euros(app):
    group.members(app, "Ann", "Bo")
    group.spend(app, "Ann", 25)
    assert [s["display"] for s in app.get("/api/settlements").json()] == ["12.50 EUR"]


@pytest.mark.requirement("alphabetical")
def test_settlement_ties_go_alphabetically(app):
    group.members(app, "Zed", "Max", "amy")
    group.spend(app, "Max", 30)
    assert plan(app) == [("amy", "Max", 1000), ("Zed", "Max", 1000)]


@pytest.mark.requirement("settle")
def test_page_settles(app, page):
    group.members(app, "Ann", "Bo")
    group.spend(app, "Bo", 9)
    page.goto(app.url + "/")
    page.click("#settle")
    page.wait(lambda: [t[:12] for t in page.texts("#settlements li")] == ["Ann pays Bo "], "the plan")
