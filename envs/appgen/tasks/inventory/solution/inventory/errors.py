"""Errors raised by inventory."""


class InventoryError(Exception):
    """A rejected request: unknown SKU, bad quantity, insufficient stock, bad date."""
