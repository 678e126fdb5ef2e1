import sqlite3
import threading

from .web import data_path

_lock = threading.Lock()


class Duplicate(Exception):
    pass


class Store:
    def __init__(self):
        self.conn = sqlite3.connect(data_path("habits.db"), check_same_thread=False)
        self.conn.executescript(
            "CREATE TABLE IF NOT EXISTS habits (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT);"
            "CREATE TABLE IF NOT EXISTS checkins (habit INTEGER, day TEXT, PRIMARY KEY (habit, day));"
        )
        self.conn.commit()

    def add(self, name):
        with _lock:
            for (existing,) in self.conn.execute("SELECT name FROM habits"):
                if existing.lower() == name.lower():
                    raise Duplicate(name)
            cur = self.conn.execute("INSERT INTO habits (name) VALUES (?)", (name,))
            self.conn.commit()
        return {"id": cur.lastrowid, "name": name}

    def habits(self):
        with _lock:
            return [{"id": i, "name": n} for i, n in self.conn.execute("SELECT id, name FROM habits ORDER BY id")]

    def get(self, hid):
        with _lock:
            row = self.conn.execute("SELECT id, name FROM habits WHERE id = ?", (hid,)).fetchone()
        return {"id": row[0], "name": row[1]} if row else None

    def check_in(self, hid, iso_day):
        with _lock:
            self.conn.execute("INSERT OR IGNORE INTO checkins VALUES (?, ?)", (hid, iso_day))
            self.conn.commit()

    def days(self, hid):
        """ISO dates of the habit's check-ins, newest first."""
        with _lock:
            return [d for (d,) in self.conn.execute(
                "SELECT day FROM checkins WHERE habit = ? ORDER BY day DESC", (hid,))]
