"""Settling up (the group's second request)."""

from . import money


def plan(balances):
    """Payments (from, to, cents): the biggest debtor pays the biggest creditor, repeatedly;
    ties go alphabetically, as the group wants everywhere."""
    left = dict(balances)
    out = []
    while True:
        debtors = sorted((p for p in left if left[p] < 0), key=lambda p: (left[p], money.people_order(p)))
        creditors = sorted((p for p in left if left[p] > 0), key=lambda p: (-left[p], money.people_order(p)))
        if not debtors or not creditors:
            return out
        d, c = debtors[0], creditors[0]
        amount = min(-left[d], left[c])
        left[d] += amount
        left[c] -= amount
        out.append((d, c, amount))


def register(router, balances):
    @router.route("GET", "/api/settlements")
    def settlements(req):
        return 200, [{"from": d, "to": c, "amount": a, "display": money.show(a)} for d, c, a in plan(balances())]
