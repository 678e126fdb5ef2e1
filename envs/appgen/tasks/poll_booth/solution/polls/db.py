import json
import sqlite3
import threading

from .web import data_path

_lock = threading.Lock()


class Store:
    def __init__(self):
        self.conn = sqlite3.connect(data_path("polls.db"), check_same_thread=False)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS polls (id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " question TEXT NOT NULL, options TEXT NOT NULL, votes TEXT NOT NULL)"
        )
        self.conn.commit()

    @staticmethod
    def _poll(row):
        pid, question, options, votes = row
        options, votes = json.loads(options), json.loads(votes)
        total = sum(votes)
        return {
            "id": pid,
            "question": question,
            "total": total,
            "options": [
                {"text": t, "votes": v, "percent": round(100 * v / total) if total else 0}
                for t, v in zip(options, votes)
            ],
        }

    def create(self, question, options):
        with _lock:
            cur = self.conn.execute(
                "INSERT INTO polls (question, options, votes) VALUES (?, ?, ?)",
                (question, json.dumps(options), json.dumps([0] * len(options))),
            )
            self.conn.commit()
        return self.get(cur.lastrowid)

    def get(self, pid):
        with _lock:
            row = self.conn.execute("SELECT * FROM polls WHERE id = ?", (pid,)).fetchone()
        return self._poll(row) if row else None

    def all(self):
        with _lock:
            rows = self.conn.execute("SELECT * FROM polls ORDER BY id DESC").fetchall()
        return [self._poll(r) for r in rows]

    def vote(self, pid, option):
        with _lock:
            row = self.conn.execute("SELECT votes FROM polls WHERE id = ?", (pid,)).fetchone()
            if row is None:
                return None
            votes = json.loads(row[0])
            if not 0 <= option < len(votes):
                raise IndexError(option)
            votes[option] += 1
            self.conn.execute("UPDATE polls SET votes = ? WHERE id = ?", (json.dumps(votes), pid))
            self.conn.commit()
        return self.get(pid)
