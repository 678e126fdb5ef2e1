def test_create_vote_results(app):
    r = app.post("/api/polls", {"question": " Drink? ", "options": ["Tea", "Coffee", "Water"]})
    assert r.status == 201
    poll = r.json()
    assert poll["question"] == "Drink?" and poll["total"] == 0
    assert [o["percent"] for o in poll["options"]] == [0, 0, 0]
    pid = poll["id"]
    for option in (0, 0, 1):
        assert app.post(f"/api/polls/{pid}/vote", {"option": option}).status == 200
    poll = app.get(f"/api/polls/{pid}").json()
    assert [(o["text"], o["votes"], o["percent"]) for o in poll["options"]] == [
        ("Tea", 2, 67), ("Coffee", 1, 33), ("Water", 0, 0)]
    assert poll["total"] == 3


def test_validation(app):
    bad = [{"question": "", "options": ["a", "b"]}, {"question": "Q", "options": ["a"]},
           {"question": "Q", "options": ["a", "A "]}, {"question": "Q", "options": ["a", ""]},
           {"question": "Q", "options": [str(i) for i in range(9)]},
           {"question": "Q" * 121, "options": ["a", "b"]}]
    for body in bad:
        assert app.post("/api/polls", body).status == 400, body
    pid = app.post("/api/polls", {"question": "Q", "options": ["a", "b"]}).json()["id"]
    assert app.post(f"/api/polls/{pid}/vote", {"option": 2}).status == 400
    assert app.post(f"/api/polls/{pid}/vote", {"option": -1}).status == 400
    assert app.post("/api/polls/999/vote", {"option": 0}).status == 404
    assert app.get("/api/polls/999").status == 404


def test_listing_and_restart(app):
    app.post("/api/polls", {"question": "First", "options": ["a", "b"]})
    second = app.post("/api/polls", {"question": "Second", "options": ["c", "d"]}).json()
    app.post(f"/api/polls/{second['id']}/vote", {"option": 1})
    app.restart()
    polls = app.get("/api/polls").json()
    assert [p["question"] for p in polls] == ["Second", "First"]
    assert polls[0]["options"][1]["votes"] == 1
