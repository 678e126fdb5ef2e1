BOOKS = [("9780141439518", "Pride and Prejudice", "Jane Austen", 2),
         ("0141439602", "Emma", "Jane Austen", 1),
         ("9780060935467", "To Kill a Mockingbird", "Harper Lee", 1)]


def stock(app):
    for isbn, title, author, copies in BOOKS:
        r = app.post("/api/books", {"isbn": isbn, "title": title, "author": author, "copies": copies})
        assert r.status == 201, r


def test_catalogue_and_search(app):
    stock(app)
    titles = lambda q: [b["title"] for b in app.get("/api/books" + q).json()]
    assert titles("") == ["Emma", "Pride and Prejudice", "To Kill a Mockingbird"]
    assert titles("?q=austen") == ["Emma", "Pride and Prejudice"]
    assert titles("?q=MOCKING") == ["To Kill a Mockingbird"]
    assert app.post("/api/books", {"isbn": "0141439602", "title": "E", "author": "A", "copies": 1}).status == 409
    for bad in ({"isbn": "123", "title": "T", "author": "A", "copies": 1},
                {"isbn": "0141439603", "title": "", "author": "A", "copies": 1},
                {"isbn": "0141439603", "title": "T", "author": "A", "copies": 0}):
        assert app.post("/api/books", bad).status == 400, bad


def test_loans_and_availability(app):
    stock(app)
    r = app.post("/api/loans", {"isbn": "0141439602", "member": "ann", "date": "2026-03-01"})
    assert r.status == 201
    loan = r.json()
    assert (loan["title"], loan["due"]) == ("Emma", "2026-03-15")
    assert app.post("/api/loans", {"isbn": "0141439602", "member": "bo", "date": "2026-03-02"}).status == 409
    app.post("/api/loans", {"isbn": "9780141439518", "member": "bo", "date": "2026-02-20"})
    assert app.post("/api/loans", {"isbn": "9780141439518", "member": "bo", "date": "2026-02-21"}).status == 409
    assert app.post("/api/loans", {"isbn": "0000000000", "member": "bo", "date": "2026-02-21"}).status == 404
    books = {b["title"]: b["available"] for b in app.get("/api/books").json()}
    assert books == {"Emma": 0, "Pride and Prejudice": 1, "To Kill a Mockingbird": 1}
    assert [l["member"] for l in app.get("/api/loans").json()] == ["bo", "ann"]
    assert [l["title"] for l in app.get("/api/loans?member=ann").json()] == ["Emma"]
    assert app.post(f"/api/loans/{loan['id']}/return").status == 200
    assert app.post(f"/api/loans/{loan['id']}/return").status == 404
    assert {b["title"]: b["available"] for b in app.get("/api/books").json()}["Emma"] == 1


def test_loan_validation(app):
    stock(app)
    for bad in ({"isbn": "0141439602", "member": "", "date": "2026-03-01"},
                {"isbn": "0141439602", "member": "ann", "date": "01/03/2026"},
                {"isbn": "0141439602", "member": "ann"}):
        assert app.post("/api/loans", bad).status == 400, bad
    assert app.post("/api/loans/999/return").status == 404
    assert app.get("/api/overdue?today=tomorrow").status == 400


def test_overdue_and_restart(app):
    stock(app)
    app.post("/api/loans", {"isbn": "0141439602", "member": "ann", "date": "2026-03-01"})
    app.post("/api/loans", {"isbn": "9780060935467", "member": "cy", "date": "2026-03-10"})
    app.restart()
    late = app.get("/api/overdue?today=2026-03-20").json()
    assert [(l["member"], l["days_late"]) for l in late] == [("ann", 5)]
    assert len(app.get("/api/overdue?today=2026-04-01").json()) == 2
