"""Read models computed from the event log."""

SIGN = {"Deposited": 1, "TransferredIn": 1, "Withdrawn": -1, "TransferredOut": -1}


def balances(events, upto=None):
    out = {}
    for e in events:
        if upto is not None and e.seq > upto:
            continue
        if e.type == "AccountOpened":
            out.setdefault(e.account, 0)
        elif e.type in SIGN:
            out[e.account] = out.get(e.account, 0) + SIGN[e.type] * e.data["amount"]
    return out


def statement(events, account_id):
    rows = []
    balance = 0
    for e in events:
        if e.account != account_id or e.type not in SIGN:
            continue
        amount = SIGN[e.type] * e.data["amount"]
        balance += amount
        if e.type == "TransferredOut":
            detail = e.data["to"]
        elif e.type == "TransferredIn":
            detail = e.data["from"]
        else:
            detail = e.data.get("memo", "")
        rows.append(
            {"seq": e.seq, "type": e.type, "amount": amount, "balance": balance, "detail": detail}
        )
    return rows


def total_deposits(events):
    return sum(e.data["amount"] for e in events if e.type == "Deposited")
