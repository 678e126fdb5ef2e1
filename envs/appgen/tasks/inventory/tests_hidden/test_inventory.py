import json
import os
import sys

import pytest

from apptest import subprocess

ROOT = os.getcwd()


@pytest.fixture
def inv(tmp_path):
    from inventory.service import Inventory

    i = Inventory(str(tmp_path / "inv.db"))
    yield i
    i.close()


def test_add_product_validation(inv):
    from inventory.errors import InventoryError

    assert inv.add_product("ab-1", "Widget") == "AB-1"
    with pytest.raises(InventoryError):
        inv.add_product("AB-1", "Again")
    with pytest.raises(InventoryError):
        inv.add_product("bad sku", "x")
    with pytest.raises(InventoryError):
        inv.add_product("X" * 21, "x")
    with pytest.raises(InventoryError):
        inv.add_product("OK", "  ")
    with pytest.raises(InventoryError):
        inv.add_product("OK", "x", reorder_level=-1)


def test_weighted_average_cost(inv):
    inv.add_product("A", "a")
    assert inv.average_cost("A") == 0.0
    inv.receive("A", 4, 10.0, "2024-01-01")
    inv.ship("A", 2, "2024-01-02")
    inv.receive("A", 6, 2.0, "2024-01-03")
    assert inv.stock("A") == 8
    assert inv.average_cost("A") == pytest.approx((2 * 10 + 6 * 2) / 8)


def test_ship_rejections_record_nothing(inv):
    from inventory.errors import InventoryError
    from inventory.reports import movements

    inv.add_product("A", "a")
    inv.receive("A", 3, 1.0, "2024-01-01")
    with pytest.raises(InventoryError):
        inv.ship("A", 4, "2024-01-02")
    with pytest.raises(InventoryError):
        inv.ship("A", 0, "2024-01-02")
    with pytest.raises(InventoryError):
        inv.receive("A", 1, 1.0, "2024-02-30")
    with pytest.raises(InventoryError, match="NOPE"):
        inv.ship("NOPE", 1, "2024-01-02")
    assert inv.stock("A") == 3
    assert len(movements(inv)) == 1


def test_stock_and_low_reports(inv):
    from inventory.reports import low_stock, stock_report, total_value

    inv.add_product("B", "Beta", reorder_level=5)
    inv.add_product("A", "Alpha", reorder_level=1)
    inv.add_product("C", "Gamma", reorder_level=0)
    inv.receive("A", 3, 1.234, "2024-01-01")
    inv.receive("B", 5, 0.1, "2024-01-01")
    assert stock_report(inv) == [
        {"sku": "A", "name": "Alpha", "stock": 3, "avg_cost": 1.23, "value": 3.7},
        {"sku": "B", "name": "Beta", "stock": 5, "avg_cost": 0.1, "value": 0.5},
        {"sku": "C", "name": "Gamma", "stock": 0, "avg_cost": 0.0, "value": 0.0},
    ]
    assert low_stock(inv) == [
        {"sku": "B", "stock": 5, "reorder_level": 5},
        {"sku": "C", "stock": 0, "reorder_level": 0},
    ]
    assert total_value(inv) == pytest.approx(4.2)


def test_movements_filters(inv):
    from inventory.reports import movements

    inv.add_product("A", "a")
    inv.add_product("B", "b")
    inv.receive("A", 5, 1, "2024-03-02")
    inv.receive("B", 5, 1, "2024-03-01")
    inv.ship("A", 1, "2024-03-02")
    inv.ship("B", 2, "2024-03-05")
    assert movements(inv) == [
        {"sku": "B", "kind": "in", "qty": 5, "day": "2024-03-01"},
        {"sku": "A", "kind": "in", "qty": 5, "day": "2024-03-02"},
        {"sku": "A", "kind": "out", "qty": 1, "day": "2024-03-02"},
        {"sku": "B", "kind": "out", "qty": 2, "day": "2024-03-05"},
    ]
    assert [m["kind"] for m in movements(inv, sku="a")] == ["in", "out"]
    assert len(movements(inv, start="2024-03-02", end="2024-03-04")) == 2


def test_persistence(tmp_path):
    from inventory.service import Inventory

    path = str(tmp_path / "p.db")
    a = Inventory(path)
    a.add_product("A", "a")
    a.receive("A", 2, 3.0, "2024-01-01")
    a.close()
    b = Inventory(path)
    assert b.stock("A") == 2 and b.average_cost("A") == pytest.approx(3.0)
    b.close()


def cli(db, *args):
    return subprocess.run(
        [sys.executable, "-m", "inventory", "--db", str(db), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )


def test_cli(tmp_path):
    db = tmp_path / "c.db"
    assert cli(db, "add-product", "w-1", "Widget", "--reorder", "3").stdout.strip() == "added W-1"
    assert (
        cli(db, "receive", "W-1", "10", "2.5", "--day", "2024-01-01").stdout.strip()
        == "W-1 stock 10"
    )
    assert cli(db, "ship", "W-1", "8", "--day", "2024-01-02").stdout.strip() == "W-1 stock 2"
    assert cli(db, "report", "value").stdout.strip() == "5.00"
    assert json.loads(cli(db, "report", "low").stdout) == [
        {"sku": "W-1", "stock": 2, "reorder_level": 3}
    ]
    assert json.loads(cli(db, "report", "stock").stdout)[0]["value"] == 5.0
    moves = json.loads(cli(db, "report", "movements", "--start", "2024-01-02").stdout)
    assert moves == [{"sku": "W-1", "kind": "out", "qty": 8, "day": "2024-01-02"}]
    out = cli(db, "ship", "W-1", "5", "--day", "2024-01-03")
    assert out.returncode == 1 and out.stderr.startswith("error:")
