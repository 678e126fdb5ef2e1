"""Products and stock movements."""

import re
from datetime import date

from inventory.db import connect
from inventory.errors import InventoryError

SKU = re.compile(r"[A-Z0-9-]{1,20}")


def check_day(day):
    try:
        return date.fromisoformat(day).isoformat()
    except (TypeError, ValueError):
        raise InventoryError(f"not an ISO date (YYYY-MM-DD): {day!r}") from None


def check_qty(qty):
    if isinstance(qty, bool) or not isinstance(qty, int) or qty <= 0:
        raise InventoryError(f"quantity must be a positive integer, got {qty!r}")
    return qty


class Inventory:
    def __init__(self, path):
        self.conn = connect(path)

    def close(self):
        self.conn.close()

    def _product(self, sku):
        row = self.conn.execute("SELECT * FROM products WHERE sku = ?", (sku.upper(),)).fetchone()
        if row is None:
            raise InventoryError(f"unknown SKU {sku!r}")
        return row

    def add_product(self, sku, name, reorder_level=0):
        sku = str(sku).upper()
        if not SKU.fullmatch(sku):
            raise InventoryError(f"invalid SKU {sku!r}: use 1-20 of A-Z, 0-9, -")
        if not str(name).strip():
            raise InventoryError("the product name must not be empty")
        if reorder_level < 0:
            raise InventoryError("the reorder level must be >= 0")
        if self.conn.execute("SELECT 1 FROM products WHERE sku = ?", (sku,)).fetchone():
            raise InventoryError(f"SKU {sku!r} already exists")
        with self.conn:
            self.conn.execute(
                "INSERT INTO products (sku, name, reorder_level) VALUES (?, ?, ?)",
                (sku, str(name).strip(), reorder_level),
            )
        return sku

    def receive(self, sku, qty, unit_cost, day):
        product = self._product(sku)
        check_qty(qty)
        day = check_day(day)
        if unit_cost < 0:
            raise InventoryError("the unit cost must be >= 0")
        stock, avg = product["stock"], product["avg_cost"]
        new_avg = (stock * avg + qty * unit_cost) / (stock + qty)
        with self.conn:
            self.conn.execute(
                "UPDATE products SET stock = ?, avg_cost = ? WHERE sku = ?",
                (stock + qty, new_avg, product["sku"]),
            )
            self.conn.execute(
                "INSERT INTO movements (sku, kind, qty, unit_cost, day) VALUES (?, 'in', ?, ?, ?)",
                (product["sku"], qty, unit_cost, day),
            )
        return stock + qty

    def ship(self, sku, qty, day):
        product = self._product(sku)
        check_qty(qty)
        day = check_day(day)
        if qty > product["stock"]:
            raise InventoryError(
                f"cannot ship {qty} of {product['sku']}: only {product['stock']} in stock"
            )
        with self.conn:
            self.conn.execute(
                "UPDATE products SET stock = stock - ? WHERE sku = ?", (qty, product["sku"])
            )
            self.conn.execute(
                "INSERT INTO movements (sku, kind, qty, day) VALUES (?, 'out', ?, ?)",
                (product["sku"], qty, day),
            )
        return product["stock"] - qty

    def stock(self, sku):
        return self._product(sku)["stock"]

    def average_cost(self, sku):
        return self._product(sku)["avg_cost"]

    def products(self):
        return self.conn.execute("SELECT * FROM products ORDER BY sku").fetchall()

    def movement_rows(self):
        return self.conn.execute("SELECT * FROM movements ORDER BY day, id").fetchall()
