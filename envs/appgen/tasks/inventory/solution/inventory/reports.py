"""Reports over an Inventory."""

from inventory.service import check_day


def stock_report(inv):
    return [
        {
            "sku": p["sku"],
            "name": p["name"],
            "stock": p["stock"],
            "avg_cost": round(p["avg_cost"], 2),
            "value": round(p["stock"] * p["avg_cost"], 2),
        }
        for p in inv.products()
    ]


def low_stock(inv):
    return [
        {"sku": p["sku"], "stock": p["stock"], "reorder_level": p["reorder_level"]}
        for p in inv.products()
        if p["stock"] <= p["reorder_level"]
    ]


def total_value(inv):
    return round(sum(p["stock"] * p["avg_cost"] for p in inv.products()), 2)


def movements(inv, sku=None, start=None, end=None):
    if sku is not None:
        sku = inv._product(sku)["sku"]
    start = check_day(start) if start else None
    end = check_day(end) if end else None
    out = []
    for m in inv.movement_rows():
        if sku is not None and m["sku"] != sku:
            continue
        if (start and m["day"] < start) or (end and m["day"] > end):
            continue
        out.append({"sku": m["sku"], "kind": m["kind"], "qty": m["qty"], "day": m["day"]})
    return out
