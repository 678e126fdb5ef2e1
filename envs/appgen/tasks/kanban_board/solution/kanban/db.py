import sqlite3
import threading

from .board import COLUMNS
from .web import data_path

lock = threading.RLock()


class Store:
    def __init__(self):
        self.conn = sqlite3.connect(data_path("kanban.db"), check_same_thread=False)
        self.conn.executescript(
            "CREATE TABLE IF NOT EXISTS cards (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT,"
            " col TEXT, position INTEGER);"
            "CREATE TABLE IF NOT EXISTS limits (col TEXT PRIMARY KEY, wip INTEGER);"
        )
        self.conn.commit()

    def cards(self):
        rows = self.conn.execute("SELECT id, title, col, position FROM cards ORDER BY position, id")
        return [{"id": i, "title": t, "column": c, "position": p} for i, t, c, p in rows]

    def limits(self):
        found = dict(self.conn.execute("SELECT col, wip FROM limits"))
        return {c: found.get(c) for c in COLUMNS}

    def set_limit(self, column, limit):
        self.conn.execute("INSERT OR REPLACE INTO limits VALUES (?, ?)", (column, limit))
        self.conn.commit()

    def add(self, title):
        n = self.conn.execute("SELECT COUNT(*) FROM cards WHERE col = 'todo'").fetchone()[0]
        cur = self.conn.execute("INSERT INTO cards (title, col, position) VALUES (?, 'todo', ?)", (title, n))
        self.conn.commit()
        return {"id": cur.lastrowid, "title": title, "column": "todo", "position": n}

    def save(self, cards):
        self.conn.executemany(
            "UPDATE cards SET col = ?, position = ? WHERE id = ?",
            [(c["column"], c["position"], c["id"]) for c in cards],
        )
        self.conn.commit()

    def delete(self, card_id):
        cur = self.conn.execute("DELETE FROM cards WHERE id = ?", (card_id,))
        self.conn.commit()
        return cur.rowcount > 0

    def board(self):
        cards, limits = self.cards(), self.limits()
        return {"columns": [
            {"name": c, "limit": limits[c],
             "cards": sorted((x for x in cards if x["column"] == c), key=lambda x: x["position"])}
            for c in COLUMNS]}
