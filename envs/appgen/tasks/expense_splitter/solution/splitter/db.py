import json
import sqlite3
import threading

from .money import people_order
from .web import data_path

_lock = threading.Lock()


class Duplicate(Exception):
    pass


class Store:
    def __init__(self):
        self.conn = sqlite3.connect(data_path("splitter.db"), check_same_thread=False)
        self.conn.executescript(
            "CREATE TABLE IF NOT EXISTS members (name TEXT PRIMARY KEY);"
            "CREATE TABLE IF NOT EXISTS expenses (id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " payer TEXT, cents INTEGER, description TEXT, shared_by TEXT);"
        )
        self.conn.commit()

    def members(self):
        with _lock:
            names = [n for (n,) in self.conn.execute("SELECT name FROM members")]
        return sorted(names, key=people_order)

    def add_member(self, name):
        if name.lower() in (m.lower() for m in self.members()):
            raise Duplicate(name)
        with _lock:
            self.conn.execute("INSERT INTO members VALUES (?)", (name,))
            self.conn.commit()

    def add_expense(self, payer, cents, description, shared_by):
        with _lock:
            cur = self.conn.execute(
                "INSERT INTO expenses (payer, cents, description, shared_by) VALUES (?, ?, ?, ?)",
                (payer, cents, description, json.dumps(shared_by)),
            )
            self.conn.commit()
        return cur.lastrowid

    def expenses(self):
        with _lock:
            rows = self.conn.execute("SELECT id, payer, cents, description, shared_by FROM expenses").fetchall()
        return [{"id": i, "payer": p, "cents": c, "description": d, "shared_by": json.loads(s)}
                for i, p, c, d, s in rows]
