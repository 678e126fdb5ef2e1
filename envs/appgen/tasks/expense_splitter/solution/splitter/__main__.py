from . import money
from .db import Duplicate, Store
from .web import HttpError, Router, run

try:
    from . import settle
except ImportError:  # settling up came with the second request
    settle = None

router = Router()
store = None


def balances():
    totals = {m: 0 for m in store.members()}
    for e in store.expenses():
        totals[e["payer"]] += e["cents"]
        for person, share in money.shares(e["cents"], e["payer"], e["shared_by"]).items():
            totals[person] -= share
    return totals


@router.route("POST", "/api/members")
def add_member(req):
    name = req.json().get("name")
    if not isinstance(name, str) or not 1 <= len(name.strip()) <= 30:
        raise HttpError(400, "name must have 1 to 30 characters")
    try:
        store.add_member(name.strip())
    except Duplicate:
        raise HttpError(409, "that member exists")
    return 201, {"name": name.strip()}


@router.route("GET", "/api/members")
def members(req):
    return 200, [{"name": n} for n in store.members()]


@router.route("POST", "/api/expenses")
def add_expense(req):
    data = req.json()
    try:
        cents = money.cents(data.get("amount"))
    except money.BadAmount as e:
        raise HttpError(400, str(e))
    names = store.members()
    payer = data.get("payer")
    shared_by = data.get("shared_by", names)
    if not isinstance(shared_by, list) or not shared_by:
        raise HttpError(400, "shared_by must list members")
    if payer not in names or any(p not in names for p in shared_by):
        raise HttpError(404, "unknown member")
    description = str(data.get("description", ""))
    shared_by = sorted(set(shared_by), key=money.people_order)
    eid = store.add_expense(payer, cents, description, shared_by)
    return 201, {"id": eid, "payer": payer, "amount": cents / 100, "description": description,
                 "shared_by": shared_by}


@router.route("GET", "/api/balances")
def get_balances(req):
    return 200, [{"name": n, "balance": b, "display": money.show(b)} for n, b in balances().items()]


if __name__ == "__main__":
    store = Store()
    if settle is not None:
        settle.register(router, balances)
    run(router)
