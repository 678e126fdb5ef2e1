from ledger.bank import Bank
from ledger.store import EventStore


def test_deposit_and_balance(tmp_path):
    bank = Bank(EventStore(str(tmp_path / "events.jsonl")))
    bank.open_account("A", "Ada")
    bank.deposit("A", 500, "salary")
    bank.withdraw("A", 120)
    assert bank.balance("A") == 380
