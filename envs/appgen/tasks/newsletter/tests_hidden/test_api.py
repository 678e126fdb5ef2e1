import re


def token_of(mail):
    found = re.search(r"/confirm\?token=([A-Za-z0-9_\-]+)", mail.json()["text"])
    assert found, mail.json()["text"]
    return found.group(1)


def test_subscribe_sends_a_confirmation(app, services):
    r = app.post("/api/subscribe", {"email": "  Ann@Example.ORG "})
    assert r.status == 201 and r.json() == {"email": "ann@example.org", "status": "pending"}
    mails = services["mail"].calls("POST", "/send")
    assert len(mails) == 1
    mail = mails[0].json()
    assert mail["to"] == "ann@example.org" and mail["subject"] == "Confirm your subscription"
    assert f"{app.url}/confirm?token=" in mail["text"]
    assert app.get("/api/subscribers").json() == [{"email": "ann@example.org", "status": "pending"}]


def test_confirm_and_duplicates(app, services):
    app.post("/api/subscribe", {"email": "bo@example.org"})
    token = token_of(services["mail"].calls()[0])
    assert app.get("/confirm?token=nope").status == 404
    r = app.get(f"/confirm?token={token}")
    assert r.status == 200 and "Subscription confirmed" in r.text
    assert app.post("/api/subscribe", {"email": "BO@example.org"}).status == 409
    app.post("/api/subscribe", {"email": "cy@example.org"})
    assert app.post("/api/subscribe", {"email": "cy@example.org"}).status == 200
    assert len(services["mail"].calls()) == 3
    app.restart()
    assert app.get("/api/subscribers").json() == [
        {"email": "bo@example.org", "status": "confirmed"},
        {"email": "cy@example.org", "status": "pending"}]


def test_invalid_addresses(app, services):
    for bad in ("", "a@b", "@x.org", "a@@x.org", "a b@x.org".replace(" ", "@"), "plain"):
        assert app.post("/api/subscribe", {"email": bad}).status == 400, bad
    assert services["mail"].calls() == []


def test_relay_failure_stores_nothing(app, services):
    services["mail"].fail(503)
    r = app.post("/api/subscribe", {"email": "dee@example.org"})
    assert r.status == 502 and "error" in r.json()
    assert app.get("/api/subscribers").json() == []


def test_issues_go_to_confirmed_subscribers(app, services):
    for email in ("zed@example.org", "amy@example.org", "pat@example.org"):
        app.post("/api/subscribe", {"email": email})
    tokens = {m.json()["to"]: token_of(m) for m in services["mail"].calls()}
    app.get(f"/confirm?token={tokens['zed@example.org']}")
    app.get(f"/confirm?token={tokens['amy@example.org']}")
    services["mail"].reset()
    assert app.post("/api/issues", {"subject": "", "text": "x"}).status == 400
    r = app.post("/api/issues", {"subject": "Issue 1", "text": "Hello readers"})
    assert r.status == 200 and r.json() == {"sent": 2, "failed": []}
    sent = [m.json() for m in services["mail"].calls("POST", "/send")]
    assert [(m["to"], m["subject"], m["text"]) for m in sent] == [
        ("amy@example.org", "Issue 1", "Hello readers"), ("zed@example.org", "Issue 1", "Hello readers")]
    services["mail"].fail(500, times=1)
    assert app.post("/api/issues", {"subject": "Issue 2", "text": "Again"}).json() == {
        "sent": 1, "failed": ["amy@example.org"]}


def test_slow_relay_is_cut_short(app, services):
    services["mail"].slow(8)
    r = app.post("/api/subscribe", {"email": "eve@example.org"}, timeout=7)
    assert r.status == 502 and "error" in r.json()
    services["mail"].reset()
    assert app.get("/api/subscribers").json() == []
