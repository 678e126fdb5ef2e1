import os
import re
import time

from . import rates
from .db import Store
from .web import HttpError, Router, run

router = Router()
store = None
MAX_AGE = float(os.environ.get("RATES_MAX_AGE") or 600)
CODE = re.compile(r"^[A-Z]{3}$")


def rates_for(base):
    cached, fetched = store.cached(base)
    if cached is not None and time.time() - fetched < MAX_AGE:
        return cached, False
    try:
        fresh = rates.latest(base)
    except rates.UnknownCurrency:
        raise HttpError(400, f"unknown currency {base}")
    except rates.ServiceError as e:
        if cached is None:
            raise HttpError(502, str(e))
        return cached, True
    store.save_rates(base, fresh)
    return fresh, False


@router.route("GET", "/api/currencies")
def currencies(req):
    try:
        return 200, rates.currencies()
    except (rates.ServiceError, rates.UnknownCurrency) as e:
        raise HttpError(502, str(e))


@router.route("GET", "/api/convert")
def convert(req):
    q = req.query
    try:
        amount = float(q.get("amount", ""))
    except ValueError:
        raise HttpError(400, "amount must be a number")
    if not amount > 0 or amount != amount or amount == float("inf"):
        raise HttpError(400, "amount must be > 0")
    src, dst = q.get("from", ""), q.get("to", "")
    if not CODE.match(src) or not CODE.match(dst):
        raise HttpError(400, "from and to must be currency codes")
    if src == dst:
        rate, stale = 1, False
    else:
        table, stale = rates_for(src)
        if dst not in table:
            raise HttpError(400, f"unknown currency {dst}")
        rate = table[dst]
    result = round(amount * rate, 2)
    shown = int(amount) if amount.is_integer() else amount
    store.record(shown, src, dst, result)
    return 200, {"amount": shown, "from": src, "to": dst, "rate": rate, "result": result, "stale": stale}


@router.route("GET", "/api/history")
def history(req):
    return 200, store.history()


if __name__ == "__main__":
    store = Store()
    run(router)
