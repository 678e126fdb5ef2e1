"""Catalogue and loan rules over the SQLite connection."""

import datetime
import re

from .db import lock

LOAN_DAYS = 14


class Refused(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def book_dict(conn, row):
    on_loan = conn.execute("SELECT COUNT(*) FROM loans WHERE isbn = ? AND returned = 0", (row["isbn"],)).fetchone()[0]
    return {"isbn": row["isbn"], "title": row["title"], "author": row["author"],
            "copies": row["copies"], "available": row["copies"] - on_loan}


def add_book(conn, data):
    isbn, title, author, copies = (data.get(k) for k in ("isbn", "title", "author", "copies"))
    if not isinstance(isbn, str) or not re.fullmatch(r"\d{10}|\d{13}", isbn):
        raise Refused(400, "isbn must have 10 or 13 digits")
    if not all(isinstance(v, str) and v.strip() for v in (title, author)):
        raise Refused(400, "title and author are required")
    if not isinstance(copies, int) or isinstance(copies, bool) or copies < 1:
        raise Refused(400, "copies must be an integer >= 1")
    with lock:
        if conn.execute("SELECT 1 FROM books WHERE isbn = ?", (isbn,)).fetchone():
            raise Refused(409, "that isbn is in the catalogue")
        conn.execute("INSERT INTO books VALUES (?, ?, ?, ?)", (isbn, title.strip(), author.strip(), copies))
        conn.commit()
        return book_dict(conn, conn.execute("SELECT * FROM books WHERE isbn = ?", (isbn,)).fetchone())


def search(conn, q):
    with lock:
        rows = conn.execute("SELECT * FROM books ORDER BY title").fetchall()
        q = q.lower()
        return [book_dict(conn, r) for r in rows if q in r["title"].lower() or q in r["author"].lower()]


def loan_dict(conn, row):
    title = conn.execute("SELECT title FROM books WHERE isbn = ?", (row["isbn"],)).fetchone()[0]
    return {"id": row["id"], "isbn": row["isbn"], "title": title, "member": row["member"],
            "date": row["date"], "due": row["due"]}


def lend(conn, data):
    isbn, member, date = data.get("isbn"), data.get("member"), data.get("date")
    if not isinstance(member, str) or not member.strip():
        raise Refused(400, "member is required")
    try:
        day = datetime.date.fromisoformat(str(date))
    except ValueError:
        raise Refused(400, "date must be YYYY-MM-DD")
    with lock:
        book = conn.execute("SELECT * FROM books WHERE isbn = ?", (isbn,)).fetchone()
        if book is None:
            raise Refused(404, "no such book")
        if book_dict(conn, book)["available"] < 1:
            raise Refused(409, "no copy is available")
        if conn.execute("SELECT 1 FROM loans WHERE isbn = ? AND member = ? AND returned = 0",
                        (isbn, member.strip())).fetchone():
            raise Refused(409, "the member already has this book")
        due = (day + datetime.timedelta(days=LOAN_DAYS)).isoformat()
        cur = conn.execute("INSERT INTO loans (isbn, member, date, due) VALUES (?, ?, ?, ?)",
                           (isbn, member.strip(), day.isoformat(), due))
        conn.commit()
        return loan_dict(conn, conn.execute("SELECT * FROM loans WHERE id = ?", (cur.lastrowid,)).fetchone())


def give_back(conn, loan_id):
    with lock:
        row = conn.execute("SELECT * FROM loans WHERE id = ? AND returned = 0", (loan_id,)).fetchone()
        if row is None:
            raise Refused(404, "no such open loan")
        conn.execute("UPDATE loans SET returned = 1 WHERE id = ?", (loan_id,))
        conn.commit()
        return loan_dict(conn, row)


def open_loans(conn, member=None):
    with lock:
        rows = conn.execute("SELECT * FROM loans WHERE returned = 0 ORDER BY due, id").fetchall()
        return [loan_dict(conn, r) for r in rows if member is None or r["member"] == member]


def overdue(conn, today):
    out = []
    for loan in open_loans(conn):
        late = (today - datetime.date.fromisoformat(loan["due"])).days
        if late > 0:
            out.append({**loan, "days_late": late})
    return out
