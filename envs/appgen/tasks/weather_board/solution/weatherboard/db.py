import sqlite3
import threading

from .web import data_path

_lock = threading.Lock()


class Store:
    def __init__(self):
        self.conn = sqlite3.connect(data_path("board.db"), check_same_thread=False)
        self.conn.executescript(
            "CREATE TABLE IF NOT EXISTS cities (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT);"
            "CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT);"
        )
        self.conn.commit()

    def cities(self):
        with _lock:
            return [r[0] for r in self.conn.execute("SELECT name FROM cities ORDER BY id")]

    def add(self, name):
        with _lock:
            self.conn.execute("INSERT INTO cities (name) VALUES (?)", (name,))
            self.conn.commit()

    def delete(self, name):
        with _lock:
            cur = self.conn.execute("DELETE FROM cities WHERE lower(name) = lower(?)", (name,))
            self.conn.commit()
        return cur.rowcount > 0

    def unit(self):
        with _lock:
            row = self.conn.execute("SELECT value FROM settings WHERE key = 'unit'").fetchone()
        return row[0] if row else "C"

    def set_unit(self, unit):
        with _lock:
            self.conn.execute("INSERT OR REPLACE INTO settings VALUES ('unit', ?)", (unit,))
            self.conn.commit()
