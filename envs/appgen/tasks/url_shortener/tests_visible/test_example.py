import json
import threading
import urllib.request

from shortener.codes import decode, encode


def test_codes_roundtrip():
    assert encode(62) == "10"
    assert decode(encode(123456)) == 123456


def test_create_link(tmp_path):
    from shortener.server import create_server

    server = create_server(str(tmp_path / "l.db"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/links",
            data=json.dumps({"url": "https://example.com/a", "code": "ex"}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 201
            assert json.load(resp)["short_url"] == f"http://127.0.0.1:{port}/ex"
    finally:
        server.shutdown()
        server.server_close()
