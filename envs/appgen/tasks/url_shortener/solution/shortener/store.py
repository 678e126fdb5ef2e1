"""Links in SQLite."""

import sqlite3
import threading

from shortener.codes import encode, is_valid_code, is_valid_url


class ConflictError(Exception):
    """The requested code is already in use."""


class LinkStore:
    def __init__(self, path):
        self._lock = threading.Lock()
        self.conn = sqlite3.connect(path, check_same_thread=False)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS links (id INTEGER PRIMARY KEY AUTOINCREMENT, "
            "code TEXT UNIQUE NOT NULL, url TEXT NOT NULL, hits INTEGER NOT NULL DEFAULT 0)"
        )
        self.conn.commit()

    def close(self):
        self.conn.close()

    @staticmethod
    def _row(row):
        return None if row is None else {"code": row[0], "url": row[1], "hits": row[2]}

    def _taken(self, code):
        return self.conn.execute("SELECT 1 FROM links WHERE code = ?", (code,)).fetchone()

    def create(self, url, code=None):
        if not is_valid_url(url):
            raise ValueError(f"not an http(s) URL: {url!r}")
        if code is not None and not is_valid_code(code):
            raise ValueError(f"invalid code: {code!r}")
        with self._lock:
            if code is None:
                n = self.conn.execute("SELECT COUNT(*) FROM links").fetchone()[0] + 1
                while self._taken(encode(n)):
                    n += 1
                code = encode(n)
            elif self._taken(code):
                raise ConflictError(f"code {code!r} is already in use")
            self.conn.execute("INSERT INTO links (code, url) VALUES (?, ?)", (code, url))
            self.conn.commit()
        return self.get(code)

    def get(self, code):
        with self._lock:
            row = self.conn.execute(
                "SELECT code, url, hits FROM links WHERE code = ?", (code,)
            ).fetchone()
        return self._row(row)

    def hit(self, code):
        with self._lock:
            self.conn.execute("UPDATE links SET hits = hits + 1 WHERE code = ?", (code,))
            self.conn.commit()

    def delete(self, code):
        with self._lock:
            cur = self.conn.execute("DELETE FROM links WHERE code = ?", (code,))
            self.conn.commit()
        return cur.rowcount > 0

    def list(self):
        with self._lock:
            rows = self.conn.execute("SELECT code, url, hits FROM links ORDER BY id").fetchall()
        return [self._row(r) for r in rows]
