"""SQLite schema."""

import sqlite3

SCHEMA = """
CREATE TABLE IF NOT EXISTS products (
    sku TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    reorder_level INTEGER NOT NULL,
    stock INTEGER NOT NULL DEFAULT 0,
    avg_cost REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS movements (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    sku TEXT NOT NULL REFERENCES products(sku),
    kind TEXT NOT NULL CHECK (kind IN ('in', 'out')),
    qty INTEGER NOT NULL,
    unit_cost REAL,
    day TEXT NOT NULL
);
"""


def connect(path):
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    conn.executescript(SCHEMA)
    return conn
