import json
import sqlite3
import threading

from .web import data_path

_lock = threading.Lock()


class Store:
    def __init__(self):
        self.conn = sqlite3.connect(data_path("planner.db"), check_same_thread=False)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS meetings (id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " date TEXT, start TEXT, end TEXT, title TEXT, people TEXT)"
        )
        self.conn.commit()

    @staticmethod
    def _row(r):
        return {"id": r[0], "date": r[1], "start": r[2], "end": r[3], "title": r[4],
                "people": json.loads(r[5])}

    def add(self, date, start, end, title, people):
        with _lock:
            cur = self.conn.execute(
                "INSERT INTO meetings (date, start, end, title, people) VALUES (?, ?, ?, ?, ?)",
                (date, start, end, title, json.dumps(people)),
            )
            self.conn.commit()
        return {"id": cur.lastrowid, "date": date, "start": start, "end": end, "title": title,
                "people": people}

    def all(self):
        with _lock:
            rows = self.conn.execute("SELECT * FROM meetings ORDER BY date, start, id").fetchall()
        return [self._row(r) for r in rows]
