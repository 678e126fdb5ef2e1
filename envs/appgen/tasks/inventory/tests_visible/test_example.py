import pytest
from inventory.service import Inventory


def test_receive_and_ship(tmp_path):
    inv = Inventory(str(tmp_path / "i.db"))
    inv.add_product("BOLT-1", "Bolt", reorder_level=5)
    inv.receive("BOLT-1", 10, 2.0, "2024-01-01")
    inv.receive("BOLT-1", 10, 4.0, "2024-01-02")
    inv.ship("BOLT-1", 5, "2024-01-03")
    assert inv.stock("BOLT-1") == 15
    assert inv.average_cost("BOLT-1") == pytest.approx(3.0)
    inv.close()
