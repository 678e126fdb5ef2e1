import sqlite3
import threading

from .web import data_path

_lock = threading.Lock()
KINDS = ("top", "bottom", "outer", "shoes")


class Store:
    def __init__(self):
        self.conn = sqlite3.connect(data_path("outfits.db"), check_same_thread=False)
        self.conn.row_factory = sqlite3.Row
        self.conn.executescript(
            "CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT,"
            " kind TEXT, warmth INTEGER, rain_ok INTEGER);"
            "CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT);"
        )
        self.conn.commit()

    @staticmethod
    def _item(row):
        d = dict(row)
        d["rain_ok"] = bool(d["rain_ok"])
        return d

    def items(self):
        with _lock:
            rows = self.conn.execute("SELECT * FROM items ORDER BY id").fetchall()
        return [self._item(r) for r in rows]

    def add(self, name, kind, warmth, rain_ok):
        with _lock:
            cur = self.conn.execute(
                "INSERT INTO items (name, kind, warmth, rain_ok) VALUES (?, ?, ?, ?)",
                (name, kind, warmth, int(rain_ok)),
            )
            self.conn.commit()
            row = self.conn.execute("SELECT * FROM items WHERE id = ?", (cur.lastrowid,)).fetchone()
        return self._item(row)

    def delete(self, item_id):
        with _lock:
            cur = self.conn.execute("DELETE FROM items WHERE id = ?", (item_id,))
            self.conn.commit()
        return cur.rowcount > 0

    def get_setting(self, key):
        with _lock:
            row = self.conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_setting(self, key, value):
        with _lock:
            self.conn.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (key, value))
            self.conn.commit()
