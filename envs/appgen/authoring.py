"""``agentgym appgen new-task NAME --dir DIR``: a working full-stack task to start from.

The scaffolded task is small but complete, and passes ``agentgym appgen check-task``
as written: a notes app (HTTP API, SQLite in ``DATA_DIR``, a page with a form) that shows
a quote from a mock ``quotes`` service. Every part of the format is there to be edited:
``task.toml`` (``[app]``, ``[services]``, ``[visible]``, ``[oracle]``), the spec, a
scaffold, visible and hidden tests (HTTP and browser), a fixture and the reference
solution. Its hidden tests read the app's files the one safe way, with
``apptest.files`` (``check-task`` flags plain ``open``). ``docs/envs/appgen-tasks.md``
describes the format.
"""

from __future__ import annotations

import re
from pathlib import Path

from agentgym import ConfigError

_NAME = re.compile(r"^[a-z][a-z0-9_]{1,40}$")

_FILES = {
    "task.toml": """\
title = "Notes with a quote of the day"
difficulty = "easy"
tags = ["fullstack", "http", "sqlite", "browser", "external-api"]

[limits]
max_turns = 30
grade_timeout = 200
test_timeout = 40
memory_mb = 1024   # the grading sandbox also runs Chromium
pids = 512

[app]
command = "python3 -m PKG"   # PORT, DATA_DIR and QUOTES_URL are in its environment
port = 8000
browser = true

[services.quotes]
fixture = "fixtures/quotes.json"   # under tests_hidden/: hidden from the agent
env = "QUOTES_URL"

[visible]
"test_example.py::test_add_note" = ["test_api.py::test_notes"]

[oracle]
order = ["PKG/__main__.py", "PKG/static/index.html", "PKG/static/app.js"]
""",
    "spec.md": """\
Build `PKG`, a small notes web app. Standard library only; the front end is plain HTML
and JavaScript served by the app; notes live in SQLite in `DATA_DIR/notes.db`, in a table
`notes` with the columns `id` and `text`.

## The quotes service (`$QUOTES_URL`)

`GET /today`: `200` `{"text": QUOTE}`. It can fail: then the app shows no quote.

## HTTP API (JSON)

- `POST /api/notes` `{"text": T}` (1 to 200 characters after trimming, else `400`
  `{"error": ...}`): `201` `{"id", "text"}`.
- `GET /api/notes`: `200`, every note, newest first.
- `GET /api/quote`: `200` `{"text": QUOTE or null}`.

## Page (`GET /`)

A form `#note-form` with `#note-text` and a submit button `#add-note`; `#notes` with one
`li` per note, newest first, updated without reloading; `#quote` with today's quote.
""",
    "scaffold/PKG/__init__.py": "",
    "scaffold/PKG/__main__.py": 'raise SystemExit("PKG: not written yet")\n',
    "tests_visible/test_example.py": """\
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request


def test_add_note(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = dict(os.environ, PORT=str(port), DATA_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "PKG"], env=env)
    try:
        url = f"http://127.0.0.1:{port}/api/notes"
        for _ in range(100):
            assert proc.poll() is None, f"the app exited ({proc.returncode}) before it served"
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        req = urllib.request.Request(url, data=json.dumps({"text": "hi"}).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.status == 201
    finally:
        proc.kill()
""",
    "tests_hidden/fixtures/quotes.json": """\
{"routes": [{"method": "GET", "path": "/today", "json": {"text": "Simple is better than complex."}}]}
""",
    "tests_hidden/test_api.py": """\
import os

from apptest import files  # files the project can reach: never plain open (check-task)


def test_notes(app):
    assert app.post("/api/notes", {"text": " first "}).json()["text"] == "first"
    app.post("/api/notes", {"text": "second"})
    assert [n["text"] for n in app.get("/api/notes").json()] == ["second", "first"]
    assert app.post("/api/notes", {"text": "  "}).status == 400
    app.restart()  # the same DATA_DIR: the notes must still be there
    assert len(app.get("/api/notes").json()) == 2


def test_quote_from_the_service(app, services):
    assert app.get("/api/quote").json() == {"text": "Simple is better than complex."}
    assert services["quotes"].calls("GET", "/today")
    services["quotes"].fail(503)
    assert app.get("/api/quote").json() == {"text": None}


def test_notes_are_kept_in_data_dir(app):
    app.post("/api/notes", {"text": "kept"})
    # a private copy of the app's database, read without following the project's links
    db = files.sqlite(os.path.join(app.data_dir, "notes.db"))
    assert [row[0] for row in db.execute("SELECT text FROM notes")] == ["kept"]
""",
    "tests_hidden/test_page.py": """\
def test_page_adds_notes(app, page):
    page.goto(app.url + "/")
    page.wait_text("#quote", "Simple is better")
    page.fill("#note-text", "from the browser")
    page.click("#add-note")
    page.wait_text("#notes li", "from the browser")
    assert [n["text"] for n in app.get("/api/notes").json()] == ["from the browser"]
""",
    "solution/PKG/__init__.py": '"""Notes."""\n',
    "solution/PKG/__main__.py": """\
import json
import os
import sqlite3
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
LOCK = threading.Lock()


def database():
    root = os.environ.get("DATA_DIR") or "data"
    os.makedirs(root, exist_ok=True)
    conn = sqlite3.connect(os.path.join(root, "notes.db"), check_same_thread=False)
    conn.execute("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT)")
    return conn


DB = database()


def quote():
    try:
        url = os.environ.get("QUOTES_URL", "http://127.0.0.1:9") + "/today"
        with urllib.request.urlopen(url, timeout=3) as resp:
            return json.loads(resp.read())["text"]
    except (OSError, ValueError, KeyError):
        return None


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body, ctype="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/api/notes":
            with LOCK:
                rows = DB.execute("SELECT id, text FROM notes ORDER BY id DESC").fetchall()
            return self.reply(200, [{"id": i, "text": t} for i, t in rows])
        if self.path == "/api/quote":
            return self.reply(200, {"text": quote()})
        files = {"/": "index.html", "/app.js": "app.js"}
        if self.path in files:
            with open(os.path.join(HERE, "static", files[self.path]), "rb") as f:
                ctype = "text/html" if self.path == "/" else "text/javascript"
                return self.reply(200, f.read(), ctype + "; charset=utf-8")
        self.reply(404, {"error": "not found"})

    def do_POST(self):
        if self.path != "/api/notes":
            return self.reply(404, {"error": "not found"})
        try:
            size = int(self.headers.get("Content-Length") or 0)
            text = json.loads(self.rfile.read(size))["text"].strip()
        except (ValueError, KeyError, TypeError, AttributeError):
            text = ""
        if not 1 <= len(text) <= 200:
            return self.reply(400, {"error": "text must have 1 to 200 characters"})
        with LOCK:
            cur = DB.execute("INSERT INTO notes (text) VALUES (?)", (text,))
            DB.commit()
        self.reply(201, {"id": cur.lastrowid, "text": text})


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("PORT") or 8000)), Handler)
    server.serve_forever()
""",
    "solution/PKG/static/index.html": """\
<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Notes</title></head>
<body>
<p id="quote"></p>
<form id="note-form"><input id="note-text"> <button id="add-note" type="submit">Add</button></form>
<ul id="notes"></ul>
<script src="/app.js"></script>
</body>
</html>
""",
    "solution/PKG/static/app.js": """\
let shown = 0;
async function refresh() {
  const mine = ++shown;
  const notes = await (await fetch("/api/notes")).json();
  if (mine !== shown) return;  // a newer refresh started: its data is newer
  document.getElementById("notes").replaceChildren(...notes.map((n) => {
    const li = document.createElement("li");
    li.textContent = n.text;
    return li;
  }));
}

document.getElementById("note-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const input = document.getElementById("note-text");
  await fetch("/api/notes", {method: "POST", headers: {"Content-Type": "application/json"},
                             body: JSON.stringify({text: input.value})});
  input.value = "";
  refresh();
});

fetch("/api/quote").then((r) => r.json()).then((q) => {
  document.getElementById("quote").textContent = q.text || "";
});
refresh();
""",
}


def new_task(name: str, directory: str | Path) -> Path:
    """Write the starter task ``name`` under ``directory``; returns its path.

    Raises:
        ConfigError: ``name`` is not a lower-case identifier, or the task exists.
    """
    if not _NAME.match(name):
        raise ConfigError(
            f"task name {name!r}: use 2 to 41 lower-case letters, digits or '_', starting "
            "with a letter (it is also the app's package name)."
        )
    root = Path(directory) / name
    if root.exists():
        raise ConfigError(f"{root} exists already; pick another name or directory.")
    for rel, text in _FILES.items():
        path = root / rel.replace("PKG", name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("PKG", name), encoding="utf-8")
    return root
