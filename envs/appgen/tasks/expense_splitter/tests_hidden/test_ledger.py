import group
import pytest


@pytest.mark.requirement("ledger")
def test_balances(app):
    group.members(app, "Ann", "Bo", "Cy")
    assert app.post("/api/members", {"name": "ann"}).status == 409
    group.spend(app, "Ann", 30)
    group.spend(app, "Bo", 12.5, ["Bo", "Cy"], "taxi")
    assert group.balances(app) == {"Ann": 2000, "Bo": -375, "Cy": -1625}
    assert app.post("/api/expenses", {"payer": "Zed", "amount": 5, "description": "x"}).status == 404
    for bad in (0, -1, 1.005, "ten"):
        assert app.post("/api/expenses", {"payer": "Ann", "amount": bad, "description": "x"}).status == 400
    app.restart()
    assert group.balances(app) == {"Ann": 2000, "Bo": -375, "Cy": -1625}


@pytest.mark.requirement("rounding")
def test_payer_pays_the_extra_cents(app):
    group.members(app, "Ann", "Bo", "Cy")
    group.spend(app, "Bo", 10)
    assert group.balances(app) == {"Ann": -333, "Bo": 666, "Cy": -333}


@pytest.mark.requirement("euro_format")
def test_amounts_in_euros(app):
    group.members(app, "Ann", "Bo")
    group.spend(app, "Ann", 25)
    shown = {b["name"]: b["display"] for b in app.get("/api/balances").json()}
    assert shown == {"Ann": "12.50 EUR", "Bo": "-12.50 EUR"}


@pytest.mark.requirement("alphabetical")
def test_people_in_alphabetical_order(app):
    group.members(app, "Zoe", "ann", "Bob")
    assert [m["name"] for m in app.get("/api/members").json()] == ["ann", "Bob", "Zoe"]
    assert [b["name"] for b in app.get("/api/balances").json()] == ["ann", "Bob", "Zoe"]


@pytest.mark.requirement("ledger")
def test_page_records_expenses(app, page):
    page.goto(app.url + "/")
    for name in ("Ann", "Bo"):
        page.fill("#member-name", name)
        page.click("#add-member")
        page.wait_text("#balances li", name)
    page.wait(lambda: page.count("#payer option") == 2, "two payers")
    page.select("#payer", "Bo")
    page.fill("#amount", "40")
    page.fill("#description", "groceries")
    page.click("#add-expense")
    page.wait(lambda: page.texts("#balances li") == ["Ann: -20.00 EUR", "Bo: 20.00 EUR"], "the balances")
