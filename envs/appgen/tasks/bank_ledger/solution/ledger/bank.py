"""Commands: check the rules against replayed state, then append events."""

from ledger.account import Account
from ledger.errors import LedgerError


def _check_amount(amount):
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        raise LedgerError(f"amount must be a positive integer number of cents, got {amount!r}")


class Bank:
    def __init__(self, store):
        self.store = store

    def _account(self, account_id):
        return Account.from_events(self.store.load(account_id), account_id)

    def _active(self, account_id):
        account = self._account(account_id)
        if not account.exists:
            raise LedgerError(f"unknown account {account_id!r}")
        if account.closed:
            raise LedgerError(f"account {account_id!r} is closed")
        return account

    def open_account(self, account_id, owner):
        account = self._account(account_id)
        if account.exists:
            raise LedgerError(f"account {account_id!r} already exists")
        self.store.append([(account_id, "AccountOpened", {"owner": owner})], {account_id: 0})

    def deposit(self, account_id, amount, memo=""):
        _check_amount(amount)
        account = self._active(account_id)
        self.store.append(
            [(account_id, "Deposited", {"amount": amount, "memo": memo})],
            {account_id: account.version},
        )

    def withdraw(self, account_id, amount, memo=""):
        _check_amount(amount)
        account = self._active(account_id)
        if amount > account.balance:
            raise LedgerError(
                f"insufficient funds in {account_id!r}: balance {account.balance}, asked {amount}"
            )
        self.store.append(
            [(account_id, "Withdrawn", {"amount": amount, "memo": memo})],
            {account_id: account.version},
        )

    def transfer(self, source, target, amount):
        _check_amount(amount)
        if source == target:
            raise LedgerError("source and target of a transfer must differ")
        src = self._active(source)
        dst = self._active(target)
        if amount > src.balance:
            raise LedgerError(
                f"insufficient funds in {source!r}: balance {src.balance}, asked {amount}"
            )
        self.store.append(
            [
                (source, "TransferredOut", {"amount": amount, "to": target}),
                (target, "TransferredIn", {"amount": amount, "from": source}),
            ],
            {source: src.version, target: dst.version},
        )

    def close_account(self, account_id):
        account = self._active(account_id)
        if account.balance != 0:
            raise LedgerError(f"account {account_id!r} still holds {account.balance}")
        self.store.append([(account_id, "AccountClosed", {})], {account_id: account.version})

    def balance(self, account_id):
        account = self._account(account_id)
        if not account.exists:
            raise LedgerError(f"unknown account {account_id!r}")
        return account.balance
