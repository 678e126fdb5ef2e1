import json
import os
import sys
import urllib.error
import urllib.request

import pytest

from apptest import subprocess, threading

ROOT = os.getcwd()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


OPENER = urllib.request.build_opener(NoRedirect)


def call(base, method, path, body=None, raw=None):
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(
        base + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with OPENER.open(req, timeout=10) as resp:
            status, headers, payload = resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        status, headers, payload = e.code, e.headers, e.read()
    return status, headers, (json.loads(payload) if payload else None)


@pytest.fixture
def base(tmp_path):
    from shortener.server import create_server

    server = create_server(str(tmp_path / "api.db"), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_create_and_redirect(base):
    status, headers, link = call(base, "POST", "/api/links", {"url": "https://example.org/p"})
    assert status == 201
    assert headers["Content-Type"].startswith("application/json")
    assert link["url"] == "https://example.org/p" and link["hits"] == 0
    assert link["short_url"] == f"{base}/{link['code']}"
    for _ in range(3):
        status, headers, _ = call(base, "GET", "/" + link["code"])
        assert status == 302
        assert headers["Location"] == "https://example.org/p"
    status, _, got = call(base, "GET", "/api/links/" + link["code"])
    assert status == 200
    assert got == {"code": link["code"], "url": "https://example.org/p", "hits": 3}


def test_errors(base):
    status, _, body = call(base, "POST", "/api/links", raw=b"{not json")
    assert status == 400 and "error" in body
    assert call(base, "POST", "/api/links", {"url": "mailto:x@y"})[0] == 400
    assert call(base, "POST", "/api/links", {"nourl": 1})[0] == 400
    assert call(base, "POST", "/api/links", {"url": "https://a.b", "code": "no way"})[0] == 400
    assert call(base, "POST", "/api/links", {"url": "https://a.b", "code": "mine"})[0] == 201
    status, _, body = call(base, "POST", "/api/links", {"url": "https://c.d", "code": "mine"})
    assert status == 409 and "error" in body
    status, _, body = call(base, "GET", "/missing")
    assert status == 404 and "error" in body
    assert call(base, "GET", "/api/links/missing")[0] == 404
    assert call(base, "GET", "/api/nothing/here")[0] == 404


def test_list_delete_and_method(base):
    call(base, "POST", "/api/links", {"url": "https://one.example", "code": "one"})
    call(base, "POST", "/api/links", {"url": "https://two.example", "code": "two"})
    status, _, links = call(base, "GET", "/api/links")
    assert status == 200
    assert [link["code"] for link in links] == ["one", "two"]
    status, _, body = call(base, "DELETE", "/api/links/one")
    assert status == 204 and body is None
    assert call(base, "DELETE", "/api/links/one")[0] == 404
    assert [link["code"] for link in call(base, "GET", "/api/links")[2]] == ["two"]
    assert call(base, "PUT", "/api/links", {"url": "https://x.y"})[0] == 405


def test_main_module_serves(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "shortener", "--db", str(tmp_path / "m.db"), "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:"), line
        base = line.split("listening on ")[1]
        assert int(base.rsplit(":", 1)[1]) > 0
        assert call(base, "POST", "/api/links", {"url": "https://z.example", "code": "z"})[0] == 201
        assert call(base, "GET", "/z")[1]["Location"] == "https://z.example"
    finally:
        proc.kill()
        proc.communicate(timeout=10)
