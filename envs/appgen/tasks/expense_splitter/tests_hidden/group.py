"""Helpers of the hidden tests (not a test module)."""


def members(app, *names):
    for n in names:
        r = app.post("/api/members", {"name": n})
        assert r.status == 201, r


def spend(app, payer, amount, shared_by=None, description="x"):
    body = {"payer": payer, "amount": amount, "description": description}
    if shared_by is not None:
        body["shared_by"] = shared_by
    r = app.post("/api/expenses", body)
    assert r.status == 201, r
    return r.json()


def balances(app):
    return {b["name"]: b["balance"] for b in app.get("/api/balances").json()}
