import sqlite3
import threading
import time

from .web import data_path

_lock = threading.Lock()


def connect():
    conn = sqlite3.connect(data_path("guestbook.db"), check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute(
        "CREATE TABLE IF NOT EXISTS entries (id INTEGER PRIMARY KEY AUTOINCREMENT,"
        " name TEXT NOT NULL, message TEXT NOT NULL, created REAL NOT NULL)"
    )
    conn.commit()
    return conn


class Store:
    def __init__(self):
        self.conn = connect()

    def list(self):
        with _lock:
            rows = self.conn.execute("SELECT * FROM entries ORDER BY created DESC, id DESC")
            return [dict(r) for r in rows]

    def add(self, name, message):
        with _lock:
            cur = self.conn.execute(
                "INSERT INTO entries (name, message, created) VALUES (?, ?, ?)",
                (name, message, time.time()),
            )
            self.conn.commit()
            row = self.conn.execute("SELECT * FROM entries WHERE id = ?", (cur.lastrowid,))
            return dict(row.fetchone())

    def delete(self, entry_id):
        with _lock:
            cur = self.conn.execute("DELETE FROM entries WHERE id = ?", (entry_id,))
            self.conn.commit()
            return cur.rowcount > 0
