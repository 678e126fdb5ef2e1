"""Settling up (the group's second request)."""


def plan(balances):
    left = dict(balances)
    out = []
    while True:
        debtors = sorted((p for p in left if left[p] < 0), key=lambda p: left[p])
        creditors = sorted((p for p in left if left[p] > 0), key=lambda p: -left[p])
        if not debtors or not creditors:
            return out
        d, c = debtors[-1] if len(debtors) > 1 and left[debtors[0]] == left[debtors[-1]] else debtors[0], creditors[0]
        amount = min(-left[d], left[c])
        left[d] += amount
        left[c] -= amount
        out.append((d, c, amount))


def register(router, balances):
    @router.route("GET", "/api/settlements")
    def settlements(req):
        return 200, [{"from": d, "to": c, "amount": a, "display": f"€{a / 100:.2f}"} for d, c, a in plan(balances())]
