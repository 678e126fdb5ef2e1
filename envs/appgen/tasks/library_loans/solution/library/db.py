import sqlite3
import threading

from .web import data_path

lock = threading.RLock()


def connect():
    conn = sqlite3.connect(data_path("library.db"), check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.executescript(
        "CREATE TABLE IF NOT EXISTS books (isbn TEXT PRIMARY KEY, title TEXT, author TEXT, copies INTEGER);"
        "CREATE TABLE IF NOT EXISTS loans (id INTEGER PRIMARY KEY AUTOINCREMENT, isbn TEXT,"
        " member TEXT, date TEXT, due TEXT, returned INTEGER DEFAULT 0);"
    )
    conn.commit()
    return conn
