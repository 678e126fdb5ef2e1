"""python -m inventory --db PATH COMMAND ..."""

import argparse
import json
import sys

from inventory import reports
from inventory.errors import InventoryError
from inventory.service import Inventory


def build_parser():
    parser = argparse.ArgumentParser(prog="inventory")
    parser.add_argument("--db", default="inventory.db")
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add-product")
    add.add_argument("sku")
    add.add_argument("name")
    add.add_argument("--reorder", type=int, default=0)
    rec = sub.add_parser("receive")
    rec.add_argument("sku")
    rec.add_argument("qty", type=int)
    rec.add_argument("unit_cost", type=float)
    rec.add_argument("--day", required=True)
    ship = sub.add_parser("ship")
    ship.add_argument("sku")
    ship.add_argument("qty", type=int)
    ship.add_argument("--day", required=True)
    rep = sub.add_parser("report")
    rep.add_argument("kind", choices=["stock", "low", "value", "movements"])
    rep.add_argument("--sku")
    rep.add_argument("--start")
    rep.add_argument("--end")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    inv = Inventory(args.db)
    try:
        if args.command == "add-product":
            print(f"added {inv.add_product(args.sku, args.name, args.reorder)}")
        elif args.command == "receive":
            stock = inv.receive(args.sku, args.qty, args.unit_cost, args.day)
            print(f"{args.sku.upper()} stock {stock}")
        elif args.command == "ship":
            print(f"{args.sku.upper()} stock {inv.ship(args.sku, args.qty, args.day)}")
        elif args.kind == "value":
            print(f"{reports.total_value(inv):.2f}")
        elif args.kind == "movements":
            print(json.dumps(reports.movements(inv, args.sku, args.start, args.end)))
        else:
            report = reports.stock_report if args.kind == "stock" else reports.low_stock
            print(json.dumps(report(inv)))
    except InventoryError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        inv.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
