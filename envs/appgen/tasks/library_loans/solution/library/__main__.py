import datetime

from . import loans
from .db import connect
from .web import HttpError, Router, run

router = Router()
conn = None


def guard(fn, *args):
    try:
        return fn(*args)
    except loans.Refused as e:
        raise HttpError(e.status, str(e))


@router.route("POST", "/api/books")
def add_book(req):
    return 201, guard(loans.add_book, conn, req.json())


@router.route("GET", "/api/books")
def books(req):
    return 200, loans.search(conn, req.query.get("q", ""))


@router.route("POST", "/api/loans")
def lend(req):
    return 201, guard(loans.lend, conn, req.json())


@router.route("POST", "/api/loans/<lid>/return")
def give_back(req):
    try:
        lid = int(req.params["lid"])
    except ValueError:
        raise HttpError(404, "no such loan")
    return 200, guard(loans.give_back, conn, lid)


@router.route("GET", "/api/loans")
def listing(req):
    return 200, loans.open_loans(conn, req.query.get("member"))


@router.route("GET", "/api/overdue")
def overdue(req):
    try:
        today = datetime.date.fromisoformat(req.query.get("today", datetime.date.today().isoformat()))
    except ValueError:
        raise HttpError(400, "today must be YYYY-MM-DD")
    return 200, loans.overdue(conn, today)


if __name__ == "__main__":
    conn = connect()
    run(router)
