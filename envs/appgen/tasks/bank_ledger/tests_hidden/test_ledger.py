import json

import pytest

from apptest import files


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "events.jsonl")


@pytest.fixture
def bank(path):
    from ledger.bank import Bank
    from ledger.store import EventStore

    b = Bank(EventStore(path))
    b.open_account("A", "Ada")
    b.open_account("B", "Bob")
    b.deposit("A", 1000, "pay")
    return b


def test_event_roundtrip():
    from ledger.events import Event

    e = Event(3, "A", 2, "Deposited", {"amount": 5, "memo": "x"})
    assert e.to_dict() == {
        "seq": 3,
        "account": "A",
        "version": 2,
        "type": "Deposited",
        "data": {"amount": 5, "memo": "x"},
    }
    back = Event.from_dict(e.to_dict())
    assert (back.seq, back.account, back.version, back.type, back.data) == (
        3,
        "A",
        2,
        "Deposited",
        {"amount": 5, "memo": "x"},
    )
    assert back.to_dict() == e.to_dict()


def test_store_versions_and_persistence(path):
    from ledger.store import EventStore

    s = EventStore(path)
    new = s.append(
        [
            ("A", "AccountOpened", {"owner": "a"}),
            ("B", "AccountOpened", {"owner": "b"}),
            ("A", "Deposited", {"amount": 5, "memo": ""}),
        ],
        {"A": 0, "B": 0},
    )
    assert [(e.seq, e.account, e.version) for e in new] == [(1, "A", 1), (2, "B", 1), (3, "A", 2)]
    s2 = EventStore(path)
    assert s2.version("A") == 2 and s2.version("B") == 1 and s2.version("C") == 0
    assert [e.seq for e in s2.load("A")] == [1, 3]
    assert [e.type for e in s2.all()] == ["AccountOpened", "AccountOpened", "Deposited"]
    lines = files.read_text(path).splitlines()
    assert json.loads(lines[2])["data"] == {"amount": 5, "memo": ""}


def test_store_concurrency_all_or_nothing(path):
    from ledger.errors import ConcurrencyError
    from ledger.store import EventStore

    s = EventStore(path)
    s.append([("A", "AccountOpened", {"owner": "a"})], {"A": 0})
    with pytest.raises(ConcurrencyError):
        s.append(
            [("B", "AccountOpened", {"owner": "b"}), ("A", "Deposited", {"amount": 1, "memo": ""})],
            {"A": 0, "B": 0},
        )
    assert len(s.all()) == 1
    assert s.version("B") == 0


def test_store_ignores_torn_tail(path):
    from ledger.store import EventStore

    s = EventStore(path)
    s.append([("A", "AccountOpened", {"owner": "a"})], {"A": 0})
    files.append_text(path, '{"seq": 2, "account": "A", "vers')
    s = EventStore(path)
    assert len(s.all()) == 1
    s.append([("A", "Deposited", {"amount": 3, "memo": ""})], {"A": 1})
    assert [e.seq for e in EventStore(path).all()] == [1, 2]


def test_account_aggregate(bank, path):
    from ledger.account import Account
    from ledger.store import EventStore

    acct = Account.from_events(EventStore(path).load("A"))
    assert (acct.id, acct.owner, acct.balance, acct.closed, acct.version, acct.exists) == (
        "A",
        "Ada",
        1000,
        False,
        2,
        True,
    )
    empty = Account.from_events([])
    assert empty.version == 0 and not empty.exists


def test_rules(bank):
    from ledger.errors import LedgerError

    for bad in (0, -5, 1.5, True, "10"):
        with pytest.raises(LedgerError):
            bank.deposit("A", bad)
    with pytest.raises(LedgerError):
        bank.withdraw("A", 1001)
    with pytest.raises(LedgerError):
        bank.open_account("A", "again")
    with pytest.raises(LedgerError):
        bank.deposit("Z", 5)
    with pytest.raises(LedgerError):
        bank.transfer("A", "A", 5)
    with pytest.raises(LedgerError):
        bank.close_account("A")
    assert bank.balance("A") == 1000
    assert len(bank.store.all()) == 3


def test_transfer_and_close(bank):
    from ledger.errors import LedgerError

    bank.transfer("A", "B", 400)
    assert (bank.balance("A"), bank.balance("B")) == (600, 400)
    with pytest.raises(LedgerError):
        bank.transfer("B", "A", 401)
    bank.withdraw("B", 400, "cash")
    bank.close_account("B")
    with pytest.raises(LedgerError, match="closed"):
        bank.deposit("B", 1)
    with pytest.raises(LedgerError):
        bank.transfer("A", "B", 1)
    last = bank.store.all()[-1]
    assert last.type == "AccountClosed" and last.account == "B"


def test_concurrent_writer_detected(bank, path):
    from ledger.errors import ConcurrencyError
    from ledger.store import EventStore

    store = EventStore(path)
    stale = store.version("A")
    bank.withdraw("A", 900)
    with pytest.raises(ConcurrencyError):
        store.append([("A", "Withdrawn", {"amount": 900, "memo": ""})], {"A": stale})
    assert bank.balance("A") == 100


def test_projections(bank):
    from ledger.projections import balances, statement, total_deposits

    bank.transfer("A", "B", 250)
    bank.withdraw("A", 50, "atm")
    bank.deposit("B", 10, "gift")
    events = bank.store.all()
    assert balances(events) == {"A": 700, "B": 260}
    assert balances(events, upto=3) == {"A": 1000, "B": 0}
    assert statement(events, "A") == [
        {"seq": 3, "type": "Deposited", "amount": 1000, "balance": 1000, "detail": "pay"},
        {"seq": 4, "type": "TransferredOut", "amount": -250, "balance": 750, "detail": "B"},
        {"seq": 6, "type": "Withdrawn", "amount": -50, "balance": 700, "detail": "atm"},
    ]
    assert statement(events, "B")[0]["detail"] == "A"
    assert total_deposits(events) == 1010


def test_replay_matches_commands(bank, path):
    from ledger.bank import Bank
    from ledger.projections import balances
    from ledger.store import EventStore

    bank.transfer("A", "B", 123)
    fresh = Bank(EventStore(path))
    assert fresh.balance("A") == 877 and fresh.balance("B") == 123
    assert balances(fresh.store.all()) == {"A": 877, "B": 123}
