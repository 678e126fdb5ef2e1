import secrets
import sqlite3
import threading

from .web import data_path

_lock = threading.Lock()


class Store:
    def __init__(self):
        self.conn = sqlite3.connect(data_path("newsletter.db"), check_same_thread=False)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS subscribers (email TEXT PRIMARY KEY, status TEXT, token TEXT)"
        )
        self.conn.commit()

    def get(self, email):
        with _lock:
            return self.conn.execute(
                "SELECT email, status, token FROM subscribers WHERE email = ?", (email,)
            ).fetchone()

    def add_pending(self, email, token=None):
        token = token or secrets.token_urlsafe(16)
        with _lock:
            self.conn.execute("INSERT OR REPLACE INTO subscribers VALUES (?, 'pending', ?)", (email, token))
            self.conn.commit()
        return token

    def confirm(self, token):
        with _lock:
            cur = self.conn.execute(
                "UPDATE subscribers SET status = 'confirmed' WHERE token = ?", (token,)
            )
            self.conn.commit()
        return cur.rowcount > 0

    def all(self):
        with _lock:
            rows = self.conn.execute("SELECT email, status FROM subscribers ORDER BY email").fetchall()
        return [{"email": e, "status": s} for e, s in rows]
