"""Errors raised by the ledger."""


class LedgerError(Exception):
    """A command was rejected (unknown account, bad amount, a broken rule)."""


class ConcurrencyError(LedgerError):
    """An account changed since the caller loaded it (expected version mismatch)."""
