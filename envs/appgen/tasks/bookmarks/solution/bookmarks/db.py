import json
import sqlite3
import threading

from .web import data_path

_lock = threading.Lock()


class Duplicate(Exception):
    pass


class Store:
    def __init__(self):
        self.conn = sqlite3.connect(data_path("bookmarks.db"), check_same_thread=False)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS bookmarks (id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " url TEXT UNIQUE, title TEXT, tags TEXT)"
        )
        self.conn.commit()

    @staticmethod
    def _row(row):
        return {"id": row[0], "url": row[1], "title": row[2], "tags": json.loads(row[3])}

    def add(self, url, title, tags):
        with _lock:
            try:
                cur = self.conn.execute(
                    "INSERT INTO bookmarks (url, title, tags) VALUES (?, ?, ?)",
                    (url, title, json.dumps(tags)),
                )
            except sqlite3.IntegrityError:
                raise Duplicate(url)
            self.conn.commit()
        return {"id": cur.lastrowid, "url": url, "title": title, "tags": tags}

    def all(self):
        with _lock:
            rows = self.conn.execute("SELECT * FROM bookmarks ORDER BY id DESC").fetchall()
        return [self._row(r) for r in rows]

    def delete(self, bid):
        with _lock:
            cur = self.conn.execute("DELETE FROM bookmarks WHERE id = ?", (bid,))
            self.conn.commit()
        return cur.rowcount > 0
