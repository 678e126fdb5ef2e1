import json
import sqlite3
import threading
import time

from .web import data_path

_lock = threading.Lock()


class Store:
    def __init__(self):
        self.conn = sqlite3.connect(data_path("converter.db"), check_same_thread=False)
        self.conn.executescript(
            "CREATE TABLE IF NOT EXISTS rates (base TEXT PRIMARY KEY, rates TEXT, fetched REAL);"
            "CREATE TABLE IF NOT EXISTS history (id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " amount REAL, src TEXT, dst TEXT, result REAL);"
        )
        self.conn.commit()

    def cached(self, base):
        with _lock:
            row = self.conn.execute("SELECT rates, fetched FROM rates WHERE base = ?", (base,)).fetchone()
        return (json.loads(row[0]), row[1]) if row else (None, 0.0)

    def save_rates(self, base, rates):
        with _lock:
            self.conn.execute(
                "INSERT OR REPLACE INTO rates VALUES (?, ?, ?)", (base, json.dumps(rates), time.time())
            )
            self.conn.commit()

    def record(self, amount, src, dst, result):
        with _lock:
            self.conn.execute(
                "INSERT INTO history (amount, src, dst, result) VALUES (?, ?, ?, ?)",
                (amount, src, dst, result),
            )
            self.conn.commit()

    def history(self):
        with _lock:
            rows = self.conn.execute(
                "SELECT amount, src, dst, result FROM history ORDER BY id DESC LIMIT 10"
            ).fetchall()
        out = []
        for amount, src, dst, result in rows:
            amount = int(amount) if float(amount).is_integer() else amount
            out.append({"amount": amount, "from": src, "to": dst, "result": result})
        return out
