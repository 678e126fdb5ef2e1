"""The account aggregate, rebuilt from its events."""


class Account:
    def __init__(self, account_id):
        self.id = account_id
        self.owner = None
        self.balance = 0
        self.closed = False
        self.exists = False
        self.version = 0

    @classmethod
    def from_events(cls, events, account_id=None):
        account = cls(
            account_id if account_id is not None else (events[0].account if events else None)
        )
        for event in events:
            account.apply(event)
        return account

    def apply(self, event):
        data = event.data
        if event.type == "AccountOpened":
            self.exists = True
            self.owner = data["owner"]
        elif event.type in ("Deposited", "TransferredIn"):
            self.balance += data["amount"]
        elif event.type in ("Withdrawn", "TransferredOut"):
            self.balance -= data["amount"]
        elif event.type == "AccountClosed":
            self.closed = True
        self.version = event.version
